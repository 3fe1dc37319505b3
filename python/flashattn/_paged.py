"""Paged K/V for flash_attn_varlen_func(block_table=...): the C++ forward takes packed
keys, so the pages each sequence uses are gathered into the packed layout first (one
copy; reading the offsets back is a host sync on the GPU). Works on numpy and torch
alike: only advanced indexing is used on the cache. The table is checked here, where it
is read, with the library's wording: numpy indexing would wrap negative page ids and
raise errors that do not name block_table."""
import numpy as np

from ._errors import invalid_argument


def _expect_table(block_table, batch):
    if block_table.dtype.kind not in "iu":
        raise invalid_argument("block_table", "an integer array (int32) [batch, max_pages]",
                               f"dtype {block_table.dtype.name}")
    if block_table.ndim != 2 or block_table.shape[0] != batch:
        raise invalid_argument("block_table", f"shape [batch={batch}, max_pages]",
                               f"shape {list(block_table.shape)}")


def packed_rows(block_table, cu_seqlens_k, page_size, num_pages):
    """(page, row) index arrays: where packed key t of the batch lives in the paged cache."""
    block_table = np.asarray(block_table)
    cu = np.asarray(cu_seqlens_k, dtype=np.int64)
    if cu.ndim != 1 or cu.shape[0] < 1:
        raise invalid_argument("cu_seqlens_k", "int32 [batch + 1]", f"shape {list(cu.shape)}")
    _expect_table(block_table, cu.shape[0] - 1)
    lengths = np.diff(cu)
    if (lengths < 0).any() or cu[0] != 0:
        raise invalid_argument("cu_seqlens_k", "non-decreasing entries starting at 0",
                               str(cu.tolist()))
    if page_size <= 0:
        raise invalid_argument("k", "a paged cache [num_pages, page_size, nheads_k, head_dim] "
                               "with page_size >= 1", f"page_size {page_size}")
    pages_needed = -(-lengths // page_size)
    if len(lengths) and pages_needed.max() > block_table.shape[1]:
        b = int(pages_needed.argmax())
        raise invalid_argument("block_table", f"at least {int(pages_needed[b])} columns "
                               f"(sequence {b} has {int(lengths[b])} keys in pages of "
                               f"{page_size})", f"{block_table.shape[1]} columns")
    for b, used in enumerate(pages_needed.tolist()):
        row = block_table[b, :used]
        bad = (row < 0) | (row >= num_pages)
        if bad.any():
            j = int(bad.argmax())
            raise invalid_argument("block_table", f"[{b}, {j}] a page index in "
                                   f"0..{num_pages - 1}", str(int(row[j])))
    sequence = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(cu[-1]) - cu[sequence]
    return block_table[sequence, position // page_size], position % page_size


def gather(frontend, cache, block_table, cu_seqlens_k, name):
    """[num_pages, page_size, nheads_k, d] -> [total_k, nheads_k, d]."""
    if cache.ndim != 4:
        raise invalid_argument(name, "a paged cache [num_pages, page_size, nheads_k, head_dim] "
                               "with block_table", f"shape {list(cache.shape)}")
    pages, rows = packed_rows(frontend.to_host(block_table), frontend.to_host(cu_seqlens_k),
                              cache.shape[1], cache.shape[0])
    return cache[frontend.from_host(pages, cache), frontend.from_host(rows, cache)]
