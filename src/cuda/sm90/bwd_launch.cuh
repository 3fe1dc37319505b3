// The launcher of the sm90 backward kernel. Included by the generated instantiation files.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "cuda/sm80/score_transform.cuh"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/bwd_launch.hpp"

namespace flashattn::cuda::sm90 {

// The most key blocks of a pair a cluster holds for the rotated order. A cluster of 8 keeps
// 120 of an H200's 132 SMs busy at one block per SM (cudaOccupancyMaxActiveClusters), one of
// 16 only 112; H200, no mask, deterministic cost: d = 64 at 1024 (8 x 8 blocks) +20% fixed,
// +12% rotated; d = 256 at 512 (8 x 8) +33% / +26%; but d = 128 at 1024 (8 key x 16 query
// blocks, the fixed order's staircase half as steep) +15% / +18%, d = 256 at 1024 (16 x 16)
// +27% / +34%.
inline constexpr int kBwdMaxClusterBlocks = 8;

template <class T, int D, bool kDropout>
Status run_backward(const core::BackwardParams& p, const BwdWorkspace& w, cudaStream_t stream) {
  using S = BwdShape<D>;
  if (p.batch == 0 || p.nheads == 0 || p.seqlen_k == 0) return Status::Ok();
  auto kernel = &bwd_kernel<T, D, kDropout>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
  const int key_blocks = (p.seqlen_k + S::kBlockN - 1) / S::kBlockN;
  const int query_blocks = (p.seqlen_q + S::kBlockM - 1) / S::kBlockM;
  const dim3 grid(key_blocks, p.nheads_k, p.batch);
  const sm80::FwdScores scores = sm80::fwd_scores(p);
  // Deterministic without a mask, as many query blocks as key blocks and at most 8 of these:
  // every pair's key blocks in one cluster take the rotated order (bwd_block_order.cuh), where
  // such a cluster fits the GPU (the occupancy query says whether one can run at all); else
  // the plain launch and the fixed order. Only with the dQ writer: the rotation's state costs
  // the column split (d = 256, 255 registers) 3-4% of its default speed on an H200.
  const bool rotate = S::kDqWriter && p.deterministic && p.window_left < 0 && p.window_right < 0 &&
                      p.cu_seqlens_q == nullptr && key_blocks >= 2 &&
                      key_blocks <= kBwdMaxClusterBlocks && key_blocks == query_blocks;
  if (rotate) {
    cudaLaunchAttribute cluster;
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = key_blocks;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(S::kThreads);
    config.dynamicSmemBytes = S::kSmemBytes;
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // not launchable on clusters here: the plain launch below
      clusters = 0;
    }
    if (clusters > 0) {
      return cuda_status(cudaLaunchKernelEx(&config, kernel, p, scores, w),
                         "launching the sm90 backward kernel on clusters");
    }
  }
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(p, scores, w);
  return cuda_status(cudaGetLastError(), "launching the sm90 backward kernel");
}

template <class T, int D>
int backward_smem_bytes() {
  return BwdShape<D>::kSmemBytes;
}

}  // namespace flashattn::cuda::sm90
