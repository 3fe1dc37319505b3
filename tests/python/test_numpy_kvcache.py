"""flash_attn_with_kvcache on numpy arrays: the in-place append is visible in the
caller's arrays, and attention covers the updated cache."""
import numpy as np
import pytest

import flashattn
import reference_attention as ref
from conftest import assert_close, randn

BATCH, HEADS, HEADS_K, DIM, CAPACITY = 3, 4, 2, 16, 40


def _cache(rng, rows=BATCH):
    return randn(rng, (rows, CAPACITY, HEADS_K, DIM)), randn(rng, (rows, CAPACITY, HEADS_K, DIM))


def _expected(q, k_cache, v_cache, seqlens, rows=None, leftpad=None, **options):
    outs = []
    for b in range(q.shape[0]):
        row = b if rows is None else rows[b]
        start = 0 if leftpad is None else leftpad[b]
        keys = slice(start, seqlens[b])
        outs.append(ref.attention(q[b:b + 1], k_cache[row:row + 1, keys],
                                  v_cache[row:row + 1, keys], **options)[0])
    return np.concatenate(outs)


@pytest.mark.parametrize("causal", [False, True])
def test_appends_in_place_and_attends(rng, causal):
    k_cache, v_cache = _cache(rng)
    before_k, before_v = k_cache.copy(), v_cache.copy()
    seqlens = np.array([5, 0, 30], dtype=np.int32)
    q = randn(rng, (BATCH, 3, HEADS, DIM))
    k_new, v_new = randn(rng, (BATCH, 3, HEADS_K, DIM)), randn(rng, (BATCH, 3, HEADS_K, DIM))
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                                 cache_seqlens=seqlens, causal=causal,
                                                 return_softmax_lse=True)
    for b, n in enumerate(seqlens):
        before_k[b, n:n + 3], before_v[b, n:n + 3] = k_new[b], v_new[b]
    np.testing.assert_array_equal(k_cache, before_k)
    np.testing.assert_array_equal(v_cache, before_v)
    assert lse.shape == (BATCH, HEADS, 3)
    assert_close(out, _expected(q, k_cache, v_cache, seqlens + 3, causal=causal), np.float32)


def test_int_cache_seqlens_and_no_append(rng):
    k_cache, v_cache = _cache(rng)
    q = randn(rng, (BATCH, 1, HEADS, DIM))
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=11)
    assert_close(out, _expected(q, k_cache, v_cache, [11] * BATCH), np.float32)


def test_cache_batch_idx_and_leftpad(rng):
    k_cache, v_cache = _cache(rng, rows=5)
    rows = np.array([4, 0, 2], dtype=np.int32)
    leftpad = np.array([0, 3, 10], dtype=np.int32)
    seqlens = np.array([9, 12, 25], dtype=np.int32)
    q = randn(rng, (BATCH, 2, HEADS, DIM))
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens,
                                            cache_batch_idx=rows, cache_leftpad=leftpad,
                                            causal=True)
    expected = _expected(q, k_cache, v_cache, seqlens, rows=rows, leftpad=leftpad, causal=True)
    assert_close(out, expected, np.float32)


def test_paged_cache(rng):
    page_size, max_pages = 16, 3
    k_pages = randn(rng, (BATCH * max_pages, page_size, HEADS_K, DIM))
    v_pages = randn(rng, (BATCH * max_pages, page_size, HEADS_K, DIM))
    block_table = rng.permutation(BATCH * max_pages).reshape(BATCH, max_pages).astype(np.int32)
    seqlens = np.array([1, 20, 40], dtype=np.int32)
    q = randn(rng, (BATCH, 2, HEADS, DIM))
    k_new, v_new = randn(rng, (BATCH, 2, HEADS_K, DIM)), randn(rng, (BATCH, 2, HEADS_K, DIM))
    out = flashattn.flash_attn_with_kvcache(q, k_pages, v_pages, k_new, v_new,
                                            cache_seqlens=seqlens, block_table=block_table,
                                            causal=True)

    def contiguous(pages):
        return pages[block_table].reshape(BATCH, max_pages * page_size, HEADS_K, DIM)
    k_flat, v_flat = contiguous(k_pages), contiguous(v_pages)
    np.testing.assert_array_equal(k_flat[1, 20:22], k_new[1])
    assert_close(out, _expected(q, k_flat, v_flat, seqlens + 2, causal=True), np.float32)


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotary(rng, interleaved):
    k_cache, v_cache = _cache(rng)
    seqlens = np.array([3, 8, 0], dtype=np.int32)
    rotary_dim = 8
    angles = rng.uniform(0, 6.3, (CAPACITY, rotary_dim // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    q = randn(rng, (BATCH, 2, HEADS, DIM))
    k_new, v_new = randn(rng, (BATCH, 2, HEADS_K, DIM)), randn(rng, (BATCH, 2, HEADS_K, DIM))
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cos, sin,
                                            cache_seqlens=seqlens, causal=True,
                                            rotary_interleaved=interleaved)
    rotated_q = np.empty(q.shape)
    for b, n in enumerate(seqlens):
        positions = n + np.arange(2)
        rotated_k = ref.rotate(k_new[b], cos, sin, positions, interleaved)
        np.testing.assert_allclose(k_cache[b, n:n + 2], rotated_k, atol=1e-5)
        rotated_q[b] = ref.rotate(q[b], cos, sin, positions, interleaved)
    assert_close(out, _expected(rotated_q, k_cache, v_cache, seqlens + 2, causal=True),
                 np.float32)


def test_cache_is_never_copied(rng):
    """A cache the library cannot write in place is an error, not a silent copy."""
    k_cache, v_cache = _cache(rng)
    q = randn(rng, (BATCH, 1, HEADS, DIM))
    new = randn(rng, (BATCH, 1, HEADS_K, DIM))
    with pytest.raises(flashattn.InvalidArgumentError, match="k_cache"):
        flashattn.flash_attn_with_kvcache(q, np.asfortranarray(k_cache), v_cache, new, new,
                                          cache_seqlens=2)


def test_read_only_cache_is_refused(rng):
    k_cache, v_cache = _cache(rng)
    k_cache.flags.writeable = False
    q = randn(rng, (BATCH, 1, HEADS, DIM))
    new = randn(rng, (BATCH, 1, HEADS_K, DIM))
    with pytest.raises(flashattn.InvalidArgumentError, match="k_cache: expected a writable"):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=2)
    flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=2)  # reading is fine
