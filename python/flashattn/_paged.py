"""Paged K/V for flash_attn_varlen_func(block_table=...): the C++ forward takes packed
keys, so the pages each sequence uses are gathered into the packed layout first (one
copy; reading the offsets back is a host sync on the GPU). Works on numpy and torch
alike: only advanced indexing is used on the cache."""
import numpy as np


def packed_rows(block_table, cu_seqlens_k, page_size):
    """(page, row) index arrays: where packed key t of the batch lives in the paged cache."""
    block_table = np.asarray(block_table)
    cu = np.asarray(cu_seqlens_k, dtype=np.int64)
    lengths = np.diff(cu)
    sequence = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(cu[-1]) - cu[sequence]
    return block_table[sequence, position // page_size], position % page_size


def gather(frontend, cache, block_table, cu_seqlens_k):
    """[num_pages, page_size, nheads_k, d] -> [total_k, nheads_k, d]."""
    pages, rows = packed_rows(frontend.to_host(block_table), frontend.to_host(cu_seqlens_k),
                              cache.shape[1])
    return cache[frontend.from_host(pages, cache), frontend.from_host(rows, cache)]
