"""FP8 (e4m3) through Python: ml_dtypes arrays and torch.float8_e4m3fn tensors with
FlashAttention-3's descale keywords, against the float64 reference on the dequantized
inputs; e4m3 KV caches through flash_attn_with_kvcache; the FP8 op under opcheck."""
import numpy as np
import pytest

import flashattn
import flashattn.fa3 as fa3
import reference_attention as ref

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn

B, SQ, SK, H, HK, D = 2, 9, 33, 4, 2, 32


def _inputs(rng):
    """e4m3 q, k, v (values of moderate size), descales [B, HK] and the dequantized float64."""
    q, k, v = (rng.standard_normal(shape).astype(E4M3)
               for shape in ((B, SQ, H, D), (B, SK, HK, D), (B, SK, HK, D)))
    descales = [rng.uniform(0.25, 2.0, (B, HK)).astype(np.float32) for _ in range(3)]

    def dequantized(x, descale, heads):
        factors = np.repeat(descale, heads // HK, axis=1)  # a query head uses its KV head's
        return x.astype(np.float64) * factors[:, None, :, None]

    exact = (dequantized(q, descales[0], H), dequantized(k, descales[1], HK),
             dequantized(v, descales[2], HK))
    return (q, k, v), descales, exact


def _assert_bf16_close(out, expected):
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == expected.shape and not np.isnan(out).any()
    # out is rounded to bf16 (8 bits): half an ulp of the largest value, and some slack.
    bound = 2.0 ** -8 * np.abs(expected).max() + 1e-3
    assert np.abs(out - expected).max() <= bound


@pytest.mark.parametrize("causal", [False, True])
def test_numpy_e4m3_forward(rng, causal):
    (q, k, v), (qd, kd, vd), exact = _inputs(rng)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True,
                                            q_descale=qd, k_descale=kd, v_descale=vd)
    assert out.dtype.name == "bfloat16"
    expected, expected_lse = ref.attention(*exact, causal=causal, softmax_scale=D ** -0.5)
    _assert_bf16_close(out, expected)
    assert np.abs(lse - expected_lse).max() < 1e-4


def test_numpy_e4m3_without_descales_is_one(rng):
    (q, k, v), _, _ = _inputs(rng)
    out = flashattn.flash_attn_func(q, k, v)
    expected, _ = ref.attention(q.astype(np.float64), k.astype(np.float64),
                                v.astype(np.float64))
    _assert_bf16_close(out, expected)
    one = np.float32(1.0)  # 0-dim factors: one for the whole tensor
    ones = flashattn.flash_attn_func(q, k, v, q_descale=np.asarray(one),
                                     k_descale=np.asarray(one), v_descale=np.asarray(one))
    assert np.array_equal(np.asarray(ones, np.float32), np.asarray(out, np.float32))


def test_fa3_names_and_a_wrong_descale(rng):
    (q, k, v), (qd, kd, vd), exact = _inputs(rng)
    out = fa3.flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd)
    expected, _ = ref.attention(*exact)
    _assert_bf16_close(out, expected)
    wrong = fa3.flash_attn_func(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd[::-1].copy())
    with pytest.raises(AssertionError):
        _assert_bf16_close(wrong, expected)


def test_descales_are_checked(rng):
    (q, k, v), (qd, _, _), _ = _inputs(rng)
    with pytest.raises(ValueError, match="descale.q"):
        flashattn.flash_attn_func(q, k, v, q_descale=qd[:, :1])
    with pytest.raises(ValueError, match="descale.q"):  # only e4m3 operands take descales
        flashattn.flash_attn_func(*(x.astype(np.float32) for x in (q, k, v)), q_descale=qd)
    with pytest.raises(ValueError, match="dropout_p"):
        flashattn.flash_attn_func(q, k, v, dropout_p=0.1)


def test_numpy_e4m3_kvcache_appends_quantized(rng):
    capacity, new = 40, 3
    k_cache = rng.standard_normal((B, capacity, HK, D)).astype(E4M3)
    v_cache = rng.standard_normal((B, capacity, HK, D)).astype(E4M3)
    kd, vd = (rng.uniform(0.5, 2.0, (B, HK)).astype(np.float32) for _ in range(2))
    q = rng.standard_normal((B, 1, H, D)).astype(np.float32)
    k_new = rng.standard_normal((B, new, HK, D)).astype(np.float32)
    v_new = rng.standard_normal((B, new, HK, D)).astype(np.float32)
    seqlens = np.array([5, 30], dtype=np.int32)
    before_k, before_v = k_cache.copy(), v_cache.copy()
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                            cache_seqlens=seqlens, k_descale=kd, v_descale=vd)
    for b in range(B):
        rows = slice(seqlens[b], seqlens[b] + new)
        quantized_k = (k_new[b] / kd[b][None, :, None]).astype(E4M3)
        quantized_v = (v_new[b] / vd[b][None, :, None]).astype(E4M3)
        assert np.array_equal(k_cache[b, rows].view(np.uint8), quantized_k.view(np.uint8))
        assert np.array_equal(v_cache[b, rows].view(np.uint8), quantized_v.view(np.uint8))
        before_k[b, rows], before_v[b, rows] = quantized_k, quantized_v
        keys = before_k[b, :seqlens[b] + new].astype(np.float64) * kd[b][None, :, None]
        values = before_v[b, :seqlens[b] + new].astype(np.float64) * vd[b][None, :, None]
        expected, _ = ref.attention(q[b:b + 1], keys[None], values[None])
        np.testing.assert_allclose(out[b:b + 1], expected, atol=2e-5)


torch = pytest.importorskip("torch")
FLOAT8 = getattr(torch, "float8_e4m3fn", None)
needs_float8 = pytest.mark.skipif(FLOAT8 is None, reason="this torch has no float8_e4m3fn")


def _torch_inputs(rng):
    (q, k, v), descales, exact = _inputs(rng)
    as_torch = lambda x: torch.from_numpy(x.view(np.uint8).copy()).view(FLOAT8)
    return ((as_torch(q), as_torch(k), as_torch(v)),
            [torch.from_numpy(d) for d in descales], exact)


@needs_float8
def test_torch_e4m3_forward_and_the_op(rng):
    (q, k, v), (qd, kd, vd), exact = _torch_inputs(rng)
    out = flashattn.flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd,
                                    v_descale=vd)
    assert out.dtype == torch.bfloat16 and out.grad_fn is None
    expected, _ = ref.attention(*exact, causal=True)
    _assert_bf16_close(out.float().numpy(), expected)
    # One factor for the whole tensor, as a 0-dim tensor.
    one = torch.tensor(1.0)
    plain = flashattn.flash_attn_func(q, k, v, q_descale=one, k_descale=one, v_descale=one)
    expected_plain, _ = ref.attention(*(x.float().numpy() for x in (q, k, v)))
    _assert_bf16_close(plain.float().numpy(), expected_plain)
    args = (q, k, v, None, None, None, 0, 0, D ** -0.5, True, -1, 0, 0.0, None, qd, kd, vd)
    # opcheck's schema test multiplies the inputs, which torch does not do for float8.
    torch.library.opcheck(torch.ops.flashattn.forward_fp8.default, args,
                          test_utils=("test_faketensor", "test_autograd_registration",
                                      "test_aot_dispatch_dynamic"))
    op_out, _ = torch.ops.flashattn.forward_fp8(*args)
    assert torch.equal(op_out, out)


_CUDA = torch.cuda.is_available() and flashattn.cuda_available()


# On the CPU backend, and on CUDA (the KV-cache kernel reads e4m3 caches; checked against the
# reference computed here from the cache it updated).
@needs_float8
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _CUDA, reason="no CUDA device or a build without CUDA"))])
def test_torch_e4m3_cache(rng, device):
    capacity = 40
    k_cache = (torch.randn(B, capacity, HK, D) * 2).to(FLOAT8).to(device)
    v_cache = (torch.randn(B, capacity, HK, D) * 2).to(FLOAT8).to(device)
    kd, vd = (torch.rand(B, HK) + 0.5).to(device), (torch.rand(B, HK) + 0.5).to(device)
    q = torch.randn(B, 2, H, D, dtype=torch.bfloat16).to(device)
    k_new = torch.randn(B, 2, HK, D, dtype=torch.bfloat16).to(device)
    v_new = torch.randn(B, 2, HK, D, dtype=torch.bfloat16).to(device)
    seqlens = torch.tensor([7, 20], dtype=torch.int32).to(device)
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new,
                                            cache_seqlens=seqlens, causal=True, k_descale=kd,
                                            v_descale=vd)
    out, q, k_new, k_cache, v_cache, kd, vd, seqlens = (
        x.cpu() for x in (out, q, k_new, k_cache, v_cache, kd, vd, seqlens))
    for b in range(B):
        rows = slice(int(seqlens[b]), int(seqlens[b]) + 2)
        quantized = (k_new[b].float() / kd[b][None, :, None]).to(FLOAT8)
        assert torch.equal(k_cache[b, rows].view(torch.uint8), quantized.view(torch.uint8))
        keys = k_cache[b, :rows.stop].double() * kd[b][None, :, None].double()
        values = v_cache[b, :rows.stop].double() * vd[b][None, :, None].double()
        expected, _ = ref.attention(q[b:b + 1].double().numpy(), keys[None].numpy(),
                                    values[None].numpy(), causal=True)
        np.testing.assert_allclose(out[b:b + 1].float().numpy(), expected, atol=2e-2)


@needs_float8
def test_torch_e4m3_traces_without_a_graph_break(rng):
    (q, k, v), (qd, kd, vd), _ = _torch_inputs(rng)

    def attend(q, k, v, qd, kd, vd):
        return flashattn.flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd,
                                         v_descale=vd)

    compiled = torch.compile(attend, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v, qd, kd, vd), attend(q, k, v, qd, kd, vd))
