"""Dropout: the Python Philox matches the library's keep-test, return_attn_probs encodes
the pattern as FlashAttention-2 does, and the seed source makes runs reproducible."""
import numpy as np

import flashattn
import flashattn.arrays
import reference_attention as ref
from conftest import assert_close, randn
from flashattn._philox import keep_mask

P = 0.3


def _keep(seed, offset, batch, heads, rows, cols):
    return np.stack([np.stack([keep_mask(seed, offset, b * heads + h, rows, cols, P)
                               for h in range(heads)]) for b in range(batch)])


def test_library_drops_what_the_python_philox_says(rng):
    q, k, v = randn(rng, (2, 9, 3, 8)), randn(rng, (2, 14, 3, 8)), randn(rng, (2, 14, 3, 8))
    seed, offset = 2**40 + 123, 2**33 + 7
    out, _ = flashattn.arrays.forward(q, k, v, dropout_p=P, dropout_seed=seed,
                                      dropout_offset=offset, causal=True)
    keep = _keep(seed, offset, 2, 3, 9, 14)
    assert 0.6 < keep.mean() < 0.8
    expected, _ = ref.attention(q, k, v, causal=True, keep=keep, dropout_p=P)
    assert_close(out, expected, np.float32)


def test_attn_probs_encode_the_dropout_pattern(rng):
    q, k, v = randn(rng, (2, 9, 2, 8)), randn(rng, (2, 14, 2, 8)), randn(rng, (2, 14, 2, 8))
    np.random.seed(5)
    out, lse, probs = flashattn.flash_attn_func(q, k, v, dropout_p=P, return_attn_probs=True)
    assert probs.shape == (2, 2, 128, 128)
    kept = np.maximum(probs[:, :, :9, :14], 0).astype(np.float64) / (1 - P)
    expected = np.einsum("bhij,bjhd->bihd", kept, v.astype(np.float64))
    assert_close(out, expected, np.float32)
    plain, _ = ref.attention(q, k, v)
    np.testing.assert_allclose(np.abs(probs[:, :, :9, :14]).sum(-1), 1, rtol=1e-5)
    np.random.seed(5)
    assert np.array_equal(out, flashattn.flash_attn_func(q, k, v, dropout_p=P))
    assert not np.allclose(out, plain)


def test_backward_regenerates_the_mask(rng):
    q, k, v = randn(rng, (1, 7, 2, 8)), randn(rng, (1, 11, 2, 8)), randn(rng, (1, 11, 2, 8))
    dout = randn(rng, (1, 7, 2, 8))
    drop = dict(dropout_p=P, dropout_seed=99, dropout_offset=4)
    out, lse = flashattn.arrays.forward(q, k, v, **drop)
    dq, dk, dv = flashattn.arrays.backward(dout, q, k, v, out, lse, **drop)
    keep = _keep(99, 4, 1, 2, 7, 11)
    # dv = (P * keep / (1 - p))^T dout per head.
    probs, _ = ref.attention(q, k, np.eye(11)[None, :, None, :].repeat(2, axis=2))
    probs = probs.transpose(0, 2, 1, 3)  # [b, h, i, j]
    want_dv = np.einsum("bhij,bihd->bjhd", probs * keep / (1 - P), dout.astype(np.float64))
    assert_close(dv, want_dv, np.float32, scale=5)
