"""The packed (varlen) functions on numpy arrays: per-sequence attention, bottom-right
alignment within each sequence, the lse layout [nheads, total_q], paged keys."""
import numpy as np
import pytest

import flashattn
import reference_attention as ref
from conftest import assert_close, assert_lse_close, randn

SEQLENS_Q = [5, 1, 17, 0, 9]
SEQLENS_K = [7, 12, 17, 3, 4]


def _cu(seqlens):
    return np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)


@pytest.mark.parametrize("options", [dict(), dict(causal=True), dict(window_size=(2, 1)),
                                     dict(softcap=1.5, causal=True)],
                         ids=["full", "causal", "window", "softcap"])
def test_varlen_matches_per_sequence_reference(rng, options):
    cu_q, cu_k = _cu(SEQLENS_Q), _cu(SEQLENS_K)
    q = randn(rng, (cu_q[-1], 4, 16))
    k = randn(rng, (cu_k[-1], 2, 16))
    v = randn(rng, (cu_k[-1], 2, 16))
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(SEQLENS_Q),
                                                   max(SEQLENS_K), return_attn_probs=True,
                                                   **options)
    window = options.pop("window_size", (-1, -1))
    expected, expected_lse = ref.varlen_attention(q, k, v, cu_q, cu_k, window=window, **options)
    assert out.shape == q.shape and lse.shape == (4, cu_q[-1])
    assert_close(out, expected, np.float32)
    assert_lse_close(lse, expected_lse, np.float32)


def test_varlen_qkvpacked_and_kvpacked(rng):
    cu = _cu(SEQLENS_K)
    qkv = randn(rng, (cu[-1], 3, 4, 8))
    out = flashattn.flash_attn_varlen_qkvpacked_func(qkv, cu, max(SEQLENS_K), causal=True)
    expected, _ = ref.varlen_attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu, cu, causal=True)
    assert_close(out, expected, np.float32)

    cu_q = _cu(SEQLENS_Q)
    q = randn(rng, (cu_q[-1], 4, 8))
    kv = randn(rng, (cu[-1], 2, 1, 8))
    out = flashattn.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu, max(SEQLENS_Q),
                                                    max(SEQLENS_K))
    expected, _ = ref.varlen_attention(q, kv[:, 0], kv[:, 1], cu_q, cu)
    assert_close(out, expected, np.float32)


def test_varlen_with_block_table_reads_pages(rng):
    page_size, pages_per_seq = 16, 2
    seqlens_k = [20, 3, 32]
    batch = len(seqlens_k)
    k_pages = randn(rng, (batch * pages_per_seq + 1, page_size, 2, 8))
    v_pages = randn(rng, (batch * pages_per_seq + 1, page_size, 2, 8))
    block_table = rng.permutation(batch * pages_per_seq + 1)[:batch * pages_per_seq]
    block_table = block_table.reshape(batch, pages_per_seq).astype(np.int32)
    cu_q, cu_k = _cu([4, 3, 6]), _cu(seqlens_k)
    q = randn(rng, (cu_q[-1], 4, 8))
    out = flashattn.flash_attn_varlen_func(q, k_pages, v_pages, cu_q, cu_k, 6, 32, causal=True,
                                           block_table=block_table)
    packed = lambda pages: np.concatenate(
        [pages[block_table[b]].reshape(-1, 2, 8)[:n] for b, n in enumerate(seqlens_k)])
    expected, _ = ref.varlen_attention(q, packed(k_pages), packed(v_pages), cu_q, cu_k,
                                       causal=True)
    assert_close(out, expected, np.float32)


def test_int64_offsets_are_accepted(rng):
    cu = _cu([3, 4]).astype(np.int64)
    q = randn(rng, (7, 2, 8))
    out = flashattn.flash_attn_varlen_func(q, q, q, cu, cu, 4, 4)
    assert_close(out, ref.varlen_attention(q, q, q, cu, cu)[0], np.float32)
