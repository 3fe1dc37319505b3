"""flashattn.rotary (flash_attn.layers.rotary's functions) against the rotation written out
element by element in float64: both pairings, a partial rotary_dim, int and per-sequence
offsets, packed rows, positions past the table, in-place and packed-qkv variants, on numpy
arrays and (when torch is installed) torch tensors with their gradients and the
RotaryEmbedding module."""
import numpy as np
import pytest

import flashattn
import flashattn.rotary as rotary
from conftest import randn


def literal_rotation(x, cos, sin, positions, interleaved):
    """float64 [..., d]: row r of x at positions[r], one pair at a time."""
    x = np.asarray(x, dtype=np.float64)
    cos, sin = np.asarray(cos, dtype=np.float64), np.asarray(sin, dtype=np.float64)
    half = cos.shape[1]
    out = x.copy()
    for index in np.ndindex(*x.shape[:-1]):
        position = positions[index[:len(positions.shape)]]
        if position >= cos.shape[0]:
            continue  # past the table: left unrotated
        for i in range(half):
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
            c, s = cos[position, i], sin[position, i]
            out[index + (a,)] = x[index + (a,)] * c - x[index + (b,)] * s
            out[index + (b,)] = x[index + (b,)] * c + x[index + (a,)] * s
    return out


def tables(rng, rows, rotary_dim):
    angles = rng.uniform(0, 2 * np.pi, (rows, rotary_dim // 2))
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def dense_positions(batch, seqlen, offsets):
    offsets = np.broadcast_to(np.asarray(offsets), (batch,))
    return np.arange(seqlen)[None, :] + offsets[:, None]


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [16, 24], ids=["whole", "partial"])
@pytest.mark.parametrize("offsets", [0, 3, [0, 5, 2]], ids=["no-offset", "int", "per-seq"])
def test_dense_numpy(rng, interleaved, rotary_dim, offsets):
    x = randn(rng, (3, 7, 2, 24))
    cos, sin = tables(rng, 12, rotary_dim)
    out = rotary.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
    expected = literal_rotation(x, cos, sin, dense_positions(3, 7, offsets), interleaved)
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_allclose(out, expected, atol=1e-6)
    if rotary_dim < 24:
        np.testing.assert_array_equal(out[..., rotary_dim:], x[..., rotary_dim:])


def test_positions_past_the_table_are_not_rotated(rng):
    x = randn(rng, (1, 6, 1, 8))
    cos, sin = tables(rng, 4, 8)
    out = rotary.apply_rotary_emb(x, cos, sin, seqlen_offsets=1)
    np.testing.assert_array_equal(out[:, 3:], x[:, 3:])  # positions 4, 5, 6
    assert not np.allclose(out[:, :3], x[:, :3])


def test_packed_rows_with_per_sequence_offsets(rng):
    cu = np.array([0, 4, 5, 11], dtype=np.int32)
    x = randn(rng, (11, 2, 16))
    cos, sin = tables(rng, 20, 16)
    offsets = np.array([2, 0, 7], dtype=np.int32)
    out = rotary.apply_rotary_emb(x, cos, sin, interleaved=True, seqlen_offsets=offsets,
                                  cu_seqlens=cu, max_seqlen=6)
    positions = np.concatenate([np.arange(n) + o for n, o in zip(np.diff(cu), offsets)])
    np.testing.assert_allclose(out, literal_rotation(x, cos, sin, positions, True), atol=1e-6)


def test_inplace_returns_x_and_fp16_rounds_once(rng):
    x = randn(rng, (2, 5, 3, 8), np.float16)
    cos, sin = tables(rng, 5, 8)
    expected = literal_rotation(x, cos, sin, dense_positions(2, 5, 0), False)
    result = rotary.apply_rotary_emb(x, cos, sin, inplace=True)
    assert result is x
    np.testing.assert_array_equal(x, expected.astype(np.float16))


def test_qkv_and_kv_in_place(rng):
    cos, sin = tables(rng, 9, 8)
    cos_k, sin_k = tables(rng, 9, 8)
    qkv = randn(rng, (2, 4, 3, 2, 8))
    before = qkv.copy()
    rotary.apply_rotary_emb_qkv_(qkv, cos, sin, cos_k, sin_k, seqlen_offsets=2)
    positions = dense_positions(2, 4, 2)
    np.testing.assert_allclose(qkv[:, :, 0], literal_rotation(before[:, :, 0], cos, sin,
                                                              positions, False), atol=1e-6)
    np.testing.assert_allclose(qkv[:, :, 1], literal_rotation(before[:, :, 1], cos_k, sin_k,
                                                              positions, False), atol=1e-6)
    np.testing.assert_array_equal(qkv[:, :, 2], before[:, :, 2])

    gqa = randn(rng, (1, 3, 6 + 2 * 2, 8))  # 6 query heads, 2 KV heads
    before = gqa.copy()
    rotary.apply_rotary_emb_qkv_(gqa, cos, sin, num_heads_q=6, interleaved=True)
    positions = dense_positions(1, 3, 0)
    np.testing.assert_allclose(gqa[:, :, :8], literal_rotation(before[:, :, :8], cos, sin,
                                                               positions, True), atol=1e-6)
    np.testing.assert_array_equal(gqa[:, :, 8:], before[:, :, 8:])

    kv = randn(rng, (2, 4, 2, 2, 8))
    before = kv.copy()
    assert rotary.apply_rotary_emb_kv_(kv, cos, sin, seqlen_offsets=[1, 4]) is kv
    np.testing.assert_allclose(kv[:, :, 0], literal_rotation(
        before[:, :, 0], cos, sin, dense_positions(2, 4, [1, 4]), False), atol=1e-6)
    np.testing.assert_array_equal(kv[:, :, 1], before[:, :, 1])


def test_bad_shapes_are_refused(rng):
    cos, sin = tables(rng, 4, 8)
    with pytest.raises(flashattn.InvalidArgumentError, match="rotary_dim"):
        rotary.apply_rotary_emb(randn(rng, (1, 2, 1, 6)), cos, sin)
    with pytest.raises(flashattn.InvalidArgumentError, match="x: expected rank 4"):
        rotary.apply_rotary_emb(randn(rng, (2, 1, 8)), cos, sin)


class TestTorch:
    @staticmethod
    def _torch():
        return pytest.importorskip("torch")

    def test_matches_numpy_and_gradient_is_the_inverse_rotation(self, rng):
        torch = self._torch()
        x = randn(rng, (2, 5, 2, 16))
        cos, sin = tables(rng, 8, 12)
        offsets = np.array([1, 3], dtype=np.int32)
        expected = rotary.apply_rotary_emb(x, cos, sin, seqlen_offsets=offsets)
        xt = torch.from_numpy(x).requires_grad_()
        out = rotary.apply_rotary_emb(xt, torch.from_numpy(cos), torch.from_numpy(sin),
                                      seqlen_offsets=torch.from_numpy(offsets))
        np.testing.assert_allclose(out.detach().numpy(), expected, atol=1e-6)
        grad = randn(rng, x.shape)
        out.backward(torch.from_numpy(grad))
        # A rotation's transpose is the rotation by -angle (sin negated).
        inverse = rotary.apply_rotary_emb(grad, cos, -sin, seqlen_offsets=offsets)
        np.testing.assert_allclose(xt.grad.numpy(), inverse, atol=1e-6)

    def test_bf16_in_place(self, rng):
        torch = self._torch()
        x = torch.from_numpy(randn(rng, (1, 4, 2, 8))).to(torch.bfloat16)
        cos, sin = tables(rng, 4, 8)
        expected = literal_rotation(x.float().numpy(), cos, sin, dense_positions(1, 4, 0), True)
        result = rotary.apply_rotary_emb(x, torch.from_numpy(cos).to(torch.bfloat16),
                                         torch.from_numpy(sin).to(torch.bfloat16),
                                         interleaved=True, inplace=True)
        assert result is x
        # cos/sin rounded to bf16 too: one bf16 ulp of slack per factor.
        np.testing.assert_allclose(x.float().numpy(), expected, atol=3e-2)

    @pytest.mark.parametrize("scale_base", [None, 16.0], ids=["rope", "xpos"])
    def test_rotary_embedding_module(self, rng, scale_base):
        torch = self._torch()
        module = rotary.RotaryEmbedding(8, base=100.0, interleaved=False, scale_base=scale_base)
        qkv = torch.from_numpy(randn(rng, (2, 6, 3, 2, 8)))
        before = qkv.clone().numpy()
        assert module(qkv, seqlen_offset=2) is qkv
        # Angles theta_p,i = p * 100 ** (-2i / 8); XPos scales q's by zeta_i ** (p' / 16),
        # k's by its inverse, p' = p - table_length // 2.
        table_length = 6 + 2
        positions = np.arange(table_length, dtype=np.float64)
        theta = positions[:, None] * 100.0 ** (-np.arange(0, 8, 2) / 8)[None, :]
        zeta = np.ones_like(theta)
        if scale_base is not None:
            columns = np.arange(0, 8, 2)
            zeta = ((columns + 0.4 * 8) / (1.4 * 8))[None, :] ** (
                (positions - table_length // 2) / scale_base)[:, None]
        rows = dense_positions(2, 6, 2)
        q = literal_rotation(before[:, :, 0], np.cos(theta) * zeta, np.sin(theta) * zeta,
                             rows, False)
        k = literal_rotation(before[:, :, 1], np.cos(theta) / zeta, np.sin(theta) / zeta,
                             rows, False)
        np.testing.assert_allclose(qkv[:, :, 0].numpy(), q, atol=1e-5)
        np.testing.assert_allclose(qkv[:, :, 1].numpy(), k, atol=1e-5)
        np.testing.assert_array_equal(qkv[:, :, 2].numpy(), before[:, :, 2])

    def test_rotary_embedding_with_separate_kv(self, rng):
        torch = self._torch()
        module = rotary.RotaryEmbedding(4, interleaved=True)
        q = torch.from_numpy(randn(rng, (1, 3, 2, 8)))
        kv = torch.from_numpy(randn(rng, (1, 3, 2, 2, 8)))
        q_before, kv_before = q.clone().numpy(), kv.clone().numpy()
        q_out, kv_out = module(q, kv)
        assert q_out is q and kv_out is kv
        theta = np.arange(3)[:, None] * 10000.0 ** (-np.arange(0, 4, 2) / 4)[None, :]
        rows = dense_positions(1, 3, 0)
        np.testing.assert_allclose(q.numpy(), literal_rotation(q_before, np.cos(theta),
                                                               np.sin(theta), rows, True),
                                   atol=1e-5)
        np.testing.assert_allclose(kv[:, :, 0].numpy(), literal_rotation(
            kv_before[:, :, 0], np.cos(theta), np.sin(theta), rows, True), atol=1e-5)
        np.testing.assert_array_equal(kv[:, :, 1].numpy(), kv_before[:, :, 1])
