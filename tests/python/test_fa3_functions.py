"""flashattn.fa3, FlashAttention-3's functions (what the compat module flash_attn_interface
re-exports), on numpy arrays: its return conventions (out, or (out, lse) on request; the KV
cache's four values), seqused_k, GQA-packed qkv, and refusals of what flashattn lacks."""
import numpy as np
import pytest

import flashattn
import flashattn.fa3 as fa3
import reference_attention as ref
from conftest import assert_close, assert_lse_close, randn


def test_flash_attn_func_returns_out_or_out_and_lse(rng):
    q, k, v = randn(rng, (2, 9, 4, 16)), randn(rng, (2, 11, 2, 16)), randn(rng, (2, 11, 2, 16))
    out = fa3.flash_attn_func(q, k, v, causal=True, window_size=(4, 0), softcap=3.0)
    expected, expected_lse = ref.attention(q, k, v, causal=True, window=(4, 0), softcap=3.0)
    assert isinstance(out, np.ndarray)
    assert_close(out, expected, np.float32)
    out, lse = fa3.flash_attn_func(q, k, v, causal=True, window_size=(4, 0), softcap=3.0,
                                   return_attn_probs=True)
    assert_close(out, expected, np.float32)
    assert_lse_close(lse, expected_lse, np.float32)


def test_qkvpacked_five_dims_and_gqa_heads(rng):
    qkv = randn(rng, (1, 7, 3, 2, 8))
    expected, _ = ref.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert_close(fa3.flash_attn_qkvpacked_func(qkv, causal=True), expected, np.float32)
    gqa = randn(rng, (1, 7, 4 + 2 * 2, 8))  # 4 query heads, 2 KV heads
    expected, _ = ref.attention(gqa[:, :, :4], gqa[:, :, 4:6], gqa[:, :, 6:])
    assert_close(fa3.flash_attn_qkvpacked_func(gqa, num_heads_q=4), expected, np.float32)
    with pytest.raises(flashattn.InvalidArgumentError, match="num_heads_q"):
        fa3.flash_attn_qkvpacked_func(gqa)


def test_varlen_with_seqused_k(rng):
    cu_q = np.array([0, 3, 8], dtype=np.int32)
    cu_k = np.array([0, 10, 16], dtype=np.int32)
    used = np.array([4, 6], dtype=np.int32)
    q, k, v = randn(rng, (8, 2, 16)), randn(rng, (16, 1, 16)), randn(rng, (16, 1, 16))
    out, lse = fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 10, seqused_k=used,
                                          causal=True, return_attn_probs=True)
    # Each sequence sees its first seqused_k keys: the reference over exactly those.
    trimmed_cu_k = np.array([0, 4, 10], dtype=np.int32)
    keep = np.r_[0:4, 10:16]
    expected, expected_lse = ref.varlen_attention(q, k[keep], v[keep], cu_q, trimmed_cu_k,
                                                  causal=True)
    assert_close(out, expected, np.float32)
    assert_lse_close(lse, expected_lse, np.float32)
    assert isinstance(fa3.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 10), np.ndarray)


def test_kvcache_page_table_and_four_return_values(rng):
    pages, page_size = 6, 16
    k_cache, v_cache = randn(rng, (pages, page_size, 1, 8)), randn(rng, (pages, page_size, 1, 8))
    page_table = np.array([[4, 1], [0, 5]], dtype=np.int32)
    seqlens = np.array([20, 7], dtype=np.int32)
    q = randn(rng, (2, 1, 2, 8))
    out, lse, out_accum, lse_accum = fa3.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=seqlens, page_table=page_table,
        return_softmax_lse=True)
    for b in range(2):
        keys = np.concatenate([k_cache[p] for p in page_table[b]])[:seqlens[b]]
        values = np.concatenate([v_cache[p] for p in page_table[b]])[:seqlens[b]]
        expected, expected_lse = ref.attention(q[b:b + 1], keys[None], values[None])
        assert_close(out[b:b + 1], expected, np.float32)
        assert_lse_close(lse[b:b + 1], expected_lse, np.float32)
    assert out_accum.size == 0 and lse_accum.size == 0
    assert isinstance(fa3.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                                  page_table=page_table), np.ndarray)


@pytest.mark.parametrize("argument", ["qv", "attention_chunk"])
def test_what_flashattn_lacks_is_refused(rng, argument):
    q = randn(rng, (1, 4, 2, 8))
    value = 16 if argument == "attention_chunk" else q
    with pytest.raises(flashattn.UnsupportedError, match=argument):
        fa3.flash_attn_func(q, q, q, **{argument: value})
    with pytest.raises(flashattn.UnsupportedError, match="cu_seqlens_q"):
        fa3.flash_attn_with_kvcache(q, q.copy(), q.copy(), cu_seqlens_q=np.zeros(2, np.int32))
