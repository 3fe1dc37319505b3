// The launcher of bwd_kernel for one tile shape. Included by the generated instantiation
// files. The scores are recomputed with the forward's conversions (score_scales), so the
// backward's P is the forward's softmax bit for bit up to the exp2 rounding.
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward_tuning.hpp"
#include "cuda/check.hpp"
#include "cuda/sm80/bwd_kernel.cuh"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/common/score_transform.cuh"

namespace flashattn::cuda::sm80 {

template <int D>
struct BwdTableTile {
  static constexpr BwdTile value = bwd_sm80_tile(D);
};

// The main kernel with tile TileT (TileT::value: a BwdTile); the tuner calls it directly.
template <class T, int D, class TileT, bool kDropout = false>
Status launch_backward(const core::BackwardParams& p, const BwdWorkspace& w, cudaStream_t stream) {
  using S = BwdShape<D, TileT>;
  if (p.batch == 0 || p.nheads == 0 || p.seqlen_k == 0) return Status::Ok();
  auto kernel = &bwd_kernel<T, D, TileT, kDropout>;
  if (S::kSmemBytes > 48 * 1024) {
    FA_CUDA_RETURN_IF_ERROR(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
  }
  const dim3 grid((p.seqlen_k + S::kBlockN - 1) / S::kBlockN, p.nheads_k, p.batch);
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(p, score_scales(p), w);
  return cuda_status(cudaGetLastError(), "launching the sm80 backward kernel");
}

template <class T, int D, bool kDropout>
Status run_backward(const core::BackwardParams& p, const BwdWorkspace& w, cudaStream_t stream) {
  return launch_backward<T, D, BwdTableTile<D>, kDropout>(p, w, stream);
}

template <class T, int D>
int backward_smem_bytes() {
  return BwdShape<D, BwdTableTile<D>>::kSmemBytes;
}

}  // namespace flashattn::cuda::sm80
