// Where the rows of a KV-cache call live, for the attention kernel:
//   - the packed query rows: row r of a (batch entry, KV head) is query i = r / group of head
//     hk * group + r % group, so the query heads that share a KV head share one tile and each
//     K/V element is read once per group;
//   - the cache rows: logical key j of batch entry b sits at cache position leftpad + j, in
//     cache row cache_batch_idx[b] (or b), or through block_table when paged. Each row is
//     addressed on its own, so a leftpad that is not a multiple of 16 or of the page size
//     needs nothing special.
// copy_rows_async is tile_copy.cuh's walk with a per-row source and a column limit (head dims
// below the compiled one are zero-filled).
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "cuda/prim/cp_async.cuh"
#include "cuda/common/smem_tile.cuh"
#include "cuda/common/tile_copy.cuh"

namespace flashattn::cuda {

struct KvRows {
  int b;
  int hk;
  int group;
  int seqlen_q;
  // logical keys: cache_seqlens[b] + appended - leftpad; without cache_seqlens (the dense
  // forward's decode route, forward.cu) the whole cache, seqlen_k keys.
  int seqlen_k;
  int leftpad;
  int64_t cache_row;  // contiguous cache: the row of batch entry b
  int page_shift;     // log2(page_size) when it is a power of two (no division), else -1

  __device__ __forceinline__ KvRows(const core::KVCacheParams& p, int batch, int kv_head)
      : b(batch), hk(kv_head), group(p.nheads / p.nheads_k), seqlen_q(p.seqlen_q) {
    leftpad = p.cache_leftpad != nullptr ? p.cache_leftpad[b] : 0;
    const int appended = p.k_new.ptr != nullptr ? p.seqlen_new : 0;
    seqlen_k = (p.cache_seqlens != nullptr ? p.cache_seqlens[b] : p.seqlen_k) + appended - leftpad;
    cache_row = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
    page_shift = __popc(p.page_size) == 1 ? __ffs(p.page_size) - 1 : -1;
  }

  __device__ __forceinline__ int packed_rows() const { return seqlen_q * group; }
  __device__ __forceinline__ int query(int packed) const { return packed / group; }
  __device__ __forceinline__ int head(int packed) const { return hk * group + packed % group; }

  // Element offset of logical key `key` in a contiguous cache operand (its head included).
  __device__ __forceinline__ int64_t key_offset(const core::Operand& cache, int key) const {
    return cache_row * cache.batch_stride + (leftpad + key) * cache.row_stride +
           hk * cache.head_stride;
  }

  // The same in a paged cache, for a key on page `page` (block_table's entry).
  __device__ __forceinline__ int64_t paged_offset(const core::KVCacheParams& p,
                                                  const core::Operand& cache, int key,
                                                  int page) const {
    const int position = leftpad + key;
    const int in_page =
        page_shift >= 0 ? position & (p.page_size - 1) : position % p.page_size;
    return static_cast<int64_t>(page) * cache.batch_stride + in_page * cache.row_stride +
           hk * cache.head_stride;
  }

  // The block_table entry that holds the page of logical key `key`.
  __device__ __forceinline__ const int32_t* page_entry(const core::KVCacheParams& p,
                                                       int key) const {
    const int position = leftpad + key;
    const int index = page_shift >= 0 ? position >> page_shift : position / p.page_size;
    return p.block_table + b * p.block_table_batch_stride + index;
  }

  __device__ __forceinline__ int64_t query_offset(const core::Operand& q, int packed) const {
    return b * q.batch_stride + query(packed) * q.row_stride + head(packed) * q.head_stride;
  }
};

namespace block {

// Rows [0, Rows) of an SmemTile<Rows, D>: row r (the i-th this thread copies) comes from
// `base + offset` as offsets(i, r, valid, offset) sets it when r < rows_valid, else
// zeros; 16-byte chunks at or past `chunks_valid` are zeros. `Sources` tiles with the same
// rows are filled at once (K and V share their row addressing). D counts the tile's 16-bit
// units: a row of 1-byte elements (an e4m3 cache, kv_convert.cuh) is a tile row of half as
// many units, and offsets are in elements of T either way.
template <int Rows, int D, int Threads, int Sources, class T, class RowOffsets>
__device__ __forceinline__ void copy_rows_async(const uint32_t (&smem_base)[Sources],
                                                const T* const (&base)[Sources],
                                                RowOffsets offsets, int rows_valid,
                                                int chunks_valid, int tid) {
  using Walk = TileCopyWalk<Rows, D, Threads>;
  constexpr int kPanel = Walk::kPanel;
  constexpr int kChunks = Walk::kChunks;
  constexpr int kRowsPerPass = Walk::kRowsPerPass;
  const Walk walk(tid);
  const int row = walk.row;
  const int chunk = walk.chunk;
  const uint32_t dst = walk.dst_bytes;
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "16-bit or 8-bit elements");
  constexpr int kPerUnit = 2 / sizeof(T);  // elements of T per 16-bit unit of the tile
#pragma unroll
  for (int i = 0; i < Rows / kRowsPerPass; ++i) {
    const int r = row + i * kRowsPerPass;
    const bool row_valid = r < rows_valid;
    int64_t offset[Sources];
    offsets(i, r, row_valid, offset);
#pragma unroll
    for (int panel = 0; panel < D / kPanel; ++panel) {
      const bool valid = row_valid && panel * kChunks + chunk < chunks_valid;
#pragma unroll
      for (int s = 0; s < Sources; ++s) {
        const T* from =
            valid ? base[s] + offset[s] + (panel * kPanel + chunk * 8) * kPerUnit : base[s];
        prim::thread::cp_async_16(smem_base[s] + dst + Walk::step_bytes(panel, i), from, valid);
      }
    }
  }
}

}  // namespace block
}  // namespace flashattn::cuda
