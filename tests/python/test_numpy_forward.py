"""flash_attn_func and its packed variants on numpy arrays, against the float64 oracle."""
import numpy as np
import pytest

import flashattn
import reference_attention as ref
from conftest import NUMPY_DTYPES, assert_close, assert_lse_close, randn


def _qkv(rng, dtype, batch=2, seqlen_q=33, seqlen_k=47, heads=4, heads_k=2, dim=16):
    q = randn(rng, (batch, seqlen_q, heads, dim), dtype)
    k = randn(rng, (batch, seqlen_k, heads_k, dim), dtype)
    v = randn(rng, (batch, seqlen_k, heads_k, dim), dtype)
    return q, k, v


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference(rng, dtype, causal):
    q, k, v = _qkv(rng, dtype)
    out, lse, probs = flashattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    expected, expected_lse = ref.attention(q, k, v, causal=causal)
    assert out.dtype == dtype and lse.dtype == np.float32
    assert lse.shape == (2, 4, 33) and probs.shape == (0,)  # as FA2 without dropout
    assert_close(out, expected, dtype)
    assert_lse_close(lse, expected_lse, dtype)


@pytest.mark.parametrize("options", [
    dict(window_size=(5, 3)),
    dict(window_size=(0, -1)),
    dict(causal=True, window_size=(7, -1)),
    dict(softcap=2.0),
    dict(softmax_scale=0.3),
    dict(alibi_slopes="per_head"),
    dict(alibi_slopes="per_batch", causal=True),
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_options(rng, options):
    q, k, v = _qkv(rng, np.float32)
    options = dict(options)
    if options.get("alibi_slopes") == "per_head":
        options["alibi_slopes"] = rng.uniform(0.1, 1.0, (4,)).astype(np.float32)
    elif options.get("alibi_slopes") == "per_batch":
        options["alibi_slopes"] = rng.uniform(0.1, 1.0, (2, 4)).astype(np.float32)
    out = flashattn.flash_attn_func(q, k, v, **options)
    window = options.pop("window_size", (-1, -1))
    expected, _ = ref.attention(q, k, v, window=window, **options)
    assert_close(out, expected, np.float32)


@pytest.mark.parametrize("dim", [1, 5, 12, 72, 256])
def test_head_dims_not_multiple_of_8(rng, dim):
    q, k, v = _qkv(rng, np.float32, seqlen_q=9, seqlen_k=17, dim=dim)
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.shape == q.shape
    assert_close(out, ref.attention(q, k, v, causal=True)[0], np.float32)


def test_rows_without_visible_keys_are_zero(rng):
    # seqlen_q > seqlen_k with causal: the first rows see no key (bottom-right alignment).
    q, k, v = _qkv(rng, np.float32, seqlen_q=20, seqlen_k=6)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert np.all(out[:, :14] == 0) and np.all(np.isneginf(lse[:, :, :14]))
    assert_close(out, ref.attention(q, k, v, causal=True)[0], np.float32)


def test_qkvpacked_reads_strided_views(rng):
    qkv = randn(rng, (2, 31, 3, 4, 16))
    out, lse, _ = flashattn.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    expected, expected_lse = ref.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2],
                                           causal=True)
    assert_close(out, expected, np.float32)
    assert_lse_close(lse, expected_lse, np.float32)


def test_kvpacked(rng):
    q = randn(rng, (2, 13, 6, 8))
    kv = randn(rng, (2, 21, 2, 3, 8))
    out = flashattn.flash_attn_kvpacked_func(q, kv, window_size=(4, 4))
    expected, _ = ref.attention(q, kv[:, :, 0], kv[:, :, 1], window=(4, 4))
    assert_close(out, expected, np.float32)


def test_transposed_and_non_contiguous_inputs(rng):
    # [b, h, s, d] storage viewed as [b, s, h, d]; a last dim with stride != 1 is copied.
    q = randn(rng, (2, 4, 19, 16)).transpose(0, 2, 1, 3)
    k = randn(rng, (2, 2, 23, 16)).transpose(0, 2, 1, 3)
    v = np.asfortranarray(randn(rng, (2, 23, 2, 16)))
    out = flashattn.flash_attn_func(q, k, v)
    assert_close(out, ref.attention(q, k, v)[0], np.float32)


def test_seqlen_one_and_empty_batch(rng):
    q, k, v = _qkv(rng, np.float32, seqlen_q=1, seqlen_k=1)
    assert_close(flashattn.flash_attn_func(q, k, v), v.repeat(2, axis=2), np.float32)
    q, k, v = _qkv(rng, np.float32, batch=0)
    assert flashattn.flash_attn_func(q, k, v).shape == (0, 33, 4, 16)
