// Where a cache position of a batch entry lives, for the kernels around the KV-cache
// attention that address the cache by absolute position (the append, the padding copy).
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "core/sequence.hpp"

namespace flashattn::cuda {

// Element offset in `cache` (p.k or p.v) of position `position` of batch entry b, head hk:
// through block_table when the cache is paged, else in cache row cache_batch_idx[b] (or b).
__device__ __forceinline__ int64_t cache_position_offset(const core::KVCacheParams& p,
                                                         const core::Operand& cache, int b,
                                                         int position, int hk) {
  if (p.block_table != nullptr) {
    const int64_t page = p.block_table[b * p.block_table_batch_stride + position / p.page_size];
    return page * cache.batch_stride + (position % p.page_size) * cache.row_stride +
           hk * cache.head_stride;
  }
  const int64_t row = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
  return core::element_offset(cache, row, position, hk);
}

}  // namespace flashattn::cuda
