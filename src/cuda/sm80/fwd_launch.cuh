// The launcher of fwd_kernel for one tile shape: grid, shared memory and the score
// conversions (score_scales, score_transform.cuh). Included by the generated instantiation files
// (and the tile tuner).
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "cuda/forward_tuning.hpp"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_launch.hpp"

namespace flashattn::cuda::sm80 {

// The tile the tuning table gives head dim D.
template <int D>
struct TableTile {
  static constexpr FwdTile value = fwd_sm80_tile(D);
};

template <class T, int D, class TileT, bool kDropout = false, class Keys = ContiguousKeys>
Status launch_forward(const core::AttentionParams& p, cudaStream_t stream, const Keys& keys = {}) {
  using S = FwdShape<D, TileT>;
  if (p.batch == 0 || p.nheads == 0 || p.seqlen_q == 0) return Status::Ok();
  auto kernel = &fwd_kernel<T, D, TileT, kDropout, Keys>;
  constexpr int kSmemBytes = S::kSmemBytes + Keys::table_bytes(S::kBlockN);
  if (kSmemBytes > 48 * 1024) {
    FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }
  const dim3 grid((p.seqlen_q + S::kBlockM - 1) / S::kBlockM, p.nheads, p.batch);
  kernel<<<grid, S::kThreads, kSmemBytes, stream>>>(p, score_scales(p), keys);
  return cuda_status(cudaGetLastError(), "launching the sm80 forward kernel");
}

template <class T, int D, bool kDropout>
Status run_forward(const core::AttentionParams& params, cudaStream_t stream) {
  return launch_forward<T, D, TableTile<D>, kDropout>(params, stream);
}

template <class T, int D>
int forward_smem_bytes() {
  return FwdShape<D, TableTile<D>>::kSmemBytes;
}

inline PagedKeys paged_keys(const core::KVCacheParams& p) {
  PagedKeys keys;
  keys.block_table = p.block_table;
  keys.table_batch_stride = p.block_table_batch_stride;
  keys.page_size = p.page_size;
  keys.page_shift = -1;
  for (int shift = 0; shift < 31; ++shift) {
    if (p.page_size == 1 << shift) keys.page_shift = shift;
  }
  return keys;
}

template <class T, int D>
Status run_forward_paged(const core::KVCacheParams& params, cudaStream_t stream) {
  return launch_forward<T, D, TableTile<D>, false>(params, stream, paged_keys(params));
}

template <class T, int D>
int forward_paged_smem_bytes() {
  using S = FwdShape<D, TableTile<D>>;
  return S::kSmemBytes + PagedKeys::table_bytes(S::kBlockN);
}

}  // namespace flashattn::cuda::sm80
