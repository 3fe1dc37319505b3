// The launcher of the sm90 forward kernel: the TMA maps of q, k and v, the persistent grid,
// shared memory. Included by the generated instantiation files.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/check.hpp"
#include "cuda/common/score_transform.cuh"
#include "cuda/sm90/fwd_kernel.cuh"
#include "cuda/sm90/fwd_launch.hpp"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/tensor_map.hpp"

namespace flashattn::cuda::sm90 {

// The operand of a paged cache (`op`, whose batch_stride is the page stride) as its map sees
// it: pages of page_size rows.
inline OperandExtent page_extent(const core::KVCacheParams& p, const core::Operand& op,
                                 int cols) {
  OperandExtent e;
  e.cols = static_cast<uint64_t>(cols);
  e.rows = static_cast<uint64_t>(p.page_size);
  e.heads = static_cast<uint64_t>(p.nheads_k);
  e.batch = static_cast<uint64_t>(p.num_pages);
  e.row_stride = op.row_stride;
  e.head_stride = p.nheads_k == 1 ? 8 : op.head_stride;
  e.batch_stride = p.num_pages == 1 ? 8 : op.batch_stride;
  return e;
}

// The kernel of `Shape` for `p` (head dims Shape's) on `stream`; with kPaged, K and V come from
// the pages of `cache` (p is then the cache call's params); kDropout: p's dropout.
template <class T, class Shape, bool kPaged = false, bool kDropout = false>
Status launch_forward(const core::AttentionParams& p, cudaStream_t stream,
                      const core::KVCacheParams* cache = nullptr) {
  if (p.batch == 0 || p.nheads == 0 || p.seqlen_q == 0) return Status::Ok();
  int device = 0, sms = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  FwdSm90Params params{};
  params.p = p;
  params.scores = score_scales(p);
  // Packed GQA: the rows of a (batch entry, KV head) are its queries times its query heads.
  const int group = p.nheads / p.nheads_k;
  while (Shape::kPackGqa && (1 << params.group_shift) < group) ++params.group_shift;
  const int heads = Shape::kPackGqa ? p.nheads_k : p.nheads;
  params.m_blocks = ((p.seqlen_q << params.group_shift) + Shape::kBlockM - 1) / Shape::kBlockM;
  params.tiles = p.batch * heads * params.m_blocks;
  // Pairs balance the blocks when each takes several tiles; with fewer tiles than blocks run
  // at once (SMs times the tile's blocks per SM), one tile per block ends sooner than the pair
  // of the longest and the shortest.
  const int slots = sms * Shape::kBlocksPerSm;  // blocks that run at once
  params.paired_tiles = p.keys_grow_with_rows() && params.tiles > slots;
  params.zero_v_tail = p.is_varlen() || p.seqused_k != nullptr || kPaged;
  const bool varlen = p.is_varlen();
  const int q_rows = varlen ? p.total_q : p.seqlen_q;
  const int k_rows = varlen ? p.total_k : p.seqlen_k;
  constexpr int kInBytes = Shape::kElemBytes;  // of q, k and v
  OperandExtent k_extent = operand_extent(p, p.k, k_rows, p.nheads_k, p.head_dim, kInBytes);
  OperandExtent v_extent = operand_extent(p, p.v, k_rows, p.nheads_k, p.head_dim_v, kInBytes);
  int key_box_rows = Shape::kBlockN;
  if constexpr (kPaged) {
    params.pages.block_table = cache->block_table;
    params.pages.table_batch_stride = cache->block_table_batch_stride;
    params.pages.page_size = cache->page_size;
    params.pages.box_rows = fwd_sm90_page_box_rows(cache->page_size, Shape::kBlockN);
    key_box_rows = params.pages.box_rows;
    k_extent = page_extent(*cache, p.k, p.head_dim);
    v_extent = page_extent(*cache, p.v, p.head_dim_v);
  }
  struct {
    CUtensorMap* map;
    const core::Operand& op;
    OperandExtent extent;
    int box_rows;
    const char* name;
  } maps[] = {{&params.q_map, p.q,
               operand_extent(p, p.q, q_rows, p.nheads, p.head_dim, kInBytes), Shape::kBlockM,
               "q"},
              {&params.k_map, p.k, k_extent, key_box_rows, "k"},
              {&params.v_map, p.v, v_extent, key_box_rows, "v"}};
  for (const auto& m : maps) {
    const bool packed_q = Shape::kPackGqa && m.map == &params.q_map;
    const std::string error =
        packed_q ? encode_packed_heads_tensor_map(m.map, m.op.ptr, m.extent, group,
                                                  Shape::kBlockM / group)
                 : encode_operand_tensor_map(m.map, m.op.ptr, m.extent, m.box_rows);
    if (!error.empty()) {
      return Status(StatusCode::kInternal,
                    std::string("sm90 forward: the TMA map of ") + m.name + ": " + error);
    }
  }

  auto kernel = &fwd_kernel<T, Shape, kPaged, kDropout>;
  constexpr int kSmemBytes = fwd_sm90_storage_bytes<Shape>();
  static_assert(fwd_sm90_storage_fits<Shape>(), "the blocks of an SM exceed its shared memory");
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int units = params.paired_tiles ? p.batch * heads * ((params.m_blocks + 1) / 2)
                                        : params.tiles;
  const int grid = units < slots ? units : slots;
  kernel<<<grid, Shape::kThreads, kSmemBytes, stream>>>(params);
  return cuda_status(cudaGetLastError(), "launching the sm90 forward kernel");
}

// The table's tile for the call, or its narrow one (fwd_sm90_use_narrow); short GQA calls
// with the query heads of a KV head packed into the narrow tile (fwd_sm90_pack_gqa), except
// with dropout: its draws are per head, and a packed tile's rows are of several heads, so
// dropout calls run one head per tile (the packing is a speed choice; the result is the same).
template <class T, int D, bool kDropout>
Status run_forward(const core::AttentionParams& p, cudaStream_t stream) {
  using Narrow = FwdSm90TableTile<D, D, true, kDropout>;
  if constexpr (!kDropout) {
    if (fwd_sm90_pack_gqa(p.nheads, p.nheads_k, p.seqlen_q, Narrow::value.block_m)) {
      return launch_forward<T, FwdShape<D, D, Narrow, true>>(p, stream);
    }
  }
  using Wide = FwdSm90TableTile<D, D, false, kDropout>;
  constexpr bool kTwoTiles = !(Narrow::value == Wide::value);
  if constexpr (kTwoTiles && fwd_sm90_dense_may_narrow(D, kDropout)) {
    if (fwd_sm90_use_narrow(D, p.keys_grow_with_rows(), p.seqlen_k)) {
      return launch_forward<T, FwdShape<D, D, Narrow>, false, kDropout>(p, stream);
    }
  }
  return launch_forward<T, FwdShape<D, D, Wide>, false, kDropout>(p, stream);
}

template <class T, int D>
int forward_smem_bytes() {
  // The packed-GQA kernel's storage is the narrow tile's; dropout has tiles of its own.
  return std::max({fwd_sm90_storage_bytes<FwdShape<D, D>>(),
                   fwd_sm90_storage_bytes<FwdShape<D, D, FwdSm90TableTile<D, D, true>>>(),
                   fwd_sm90_storage_bytes<FwdShape<D, D, FwdSm90TableTile<D, D, true, true>>>(),
                   fwd_sm90_storage_bytes<FwdShape<D, D, FwdSm90TableTile<D, D, false, true>>>()});
}

// The paged prefill: the dense forward's tile (fwd_sm90_use_narrow), the paged kernel. With
// its boxes copied by the whole producer warpgroup, a key block's box count hardly matters,
// so the page size does not choose the tile (bench/RESULTS.md).
template <class T, int D>
Status run_forward_paged(const core::KVCacheParams& p, cudaStream_t stream) {
  using Narrow = FwdSm90TableTile<D, D, true>;
  if constexpr (!(Narrow::value == FwdSm90TableTile<D, D>::value) &&
                fwd_sm90_dense_may_narrow(D, false)) {
    if (fwd_sm90_use_narrow(D, p.keys_grow_with_rows(), p.seqlen_k)) {
      return launch_forward<T, FwdShape<D, D, Narrow>, true>(p, stream, &p);
    }
  }
  return launch_forward<T, FwdShape<D, D>, true>(p, stream, &p);
}

template <class T, int D>
int forward_paged_smem_bytes() {
  return forward_smem_bytes<T, D>();
}

// The FP8 forward: e4m3 q, k and v, out of type T; the FP8 table's tile, or its narrow one
// where the head dim has two and fwd_sm90_fp8_use_narrow takes it.
template <int D, bool kNarrow>
using FwdFp8Shape = FwdShape<D, D, FwdSm90Fp8TableTile<D, kNarrow>, false, true>;

template <class T, int D>
Status run_forward_fp8(const core::AttentionParams& p, cudaStream_t stream) {
  constexpr bool kTwoTiles =
      !(FwdSm90Fp8TableTile<D, true>::value == FwdSm90Fp8TableTile<D>::value);
  if constexpr (kTwoTiles) {
    if (fwd_sm90_fp8_use_narrow(D, p.keys_grow_with_rows(), p.seqlen_k)) {
      return launch_forward<T, FwdFp8Shape<D, true>>(p, stream);
    }
  }
  return launch_forward<T, FwdFp8Shape<D, false>>(p, stream);
}

template <class T, int D>
int forward_fp8_smem_bytes() {
  const int narrow = fwd_sm90_storage_bytes<FwdFp8Shape<D, true>>();
  const int other = fwd_sm90_storage_bytes<FwdFp8Shape<D, false>>();
  return narrow > other ? narrow : other;
}

}  // namespace flashattn::cuda::sm90
