// The launcher of the sm90 backward kernel. Included by the generated instantiation files.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "cuda/common/score_transform.cuh"
#include "cuda/sm90/bwd_kernel.cuh"
#include "cuda/sm90/bwd_launch.hpp"
#include "cuda/sm90/bwd_q_do_loads.cuh"
#include "cuda/sm90/tensor_map.hpp"

namespace flashattn::cuda::sm90 {

template <class T, int D, bool kDropout, bool kDeterministic>
Status launch_backward(const core::BackwardParams& p, const BwdWorkspace& w,
                       cudaStream_t stream) {
  using S = BwdShape<D, kDeterministic, kDropout>;
  constexpr int kSmemBytes = bwd_storage_bytes<S>();
  static_assert(kSmemBytes == bwd_sm90_smem_bytes(D, S::kTile, S::kStaggered),
                "the storage disagrees with the table's size");
  auto kernel = &bwd_kernel<T, D, kDropout, kDeterministic>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid((p.seqlen_k + S::kBlockN - 1) / S::kBlockN, p.nheads_k * w.kv_splits,
                  p.batch);
  const ScoreScales scores = score_scales(p);
  // Q and dO by TMA where both map (16-byte aligned base and strides); else by cp.async.
  BwdTmaMaps maps{};
  const int q_rows = p.is_varlen() ? p.total_q : p.seqlen_q;
  auto encode = [&](CUtensorMap* map, const core::Operand& op) {
    return encode_operand_tensor_map(map, op.ptr, operand_extent(p, op, q_rows, p.nheads, D),
                                     S::kBlockM)
        .empty();
  };
  maps.ok = encode(&maps.q, p.q) && encode(&maps.dout, p.dout);
  kernel<<<grid, S::kThreads, kSmemBytes, stream>>>(p, scores, w, maps);
  return cuda_status(cudaGetLastError(), "launching the sm90 backward kernel");
}

template <class T, int D, bool kDropout>
Status run_backward(const core::BackwardParams& p, const BwdWorkspace& w, cudaStream_t stream) {
  if (p.batch == 0 || p.nheads == 0 || p.seqlen_k == 0) return Status::Ok();
  return p.deterministic ? launch_backward<T, D, kDropout, true>(p, w, stream)
                         : launch_backward<T, D, kDropout, false>(p, w, stream);
}

// The largest of the kernels' (the staggered schedule's storage differs).
template <class T, int D>
int backward_smem_bytes() {
  const int lock_step = bwd_storage_bytes<BwdShape<D, false, false>>();
  const int staggered = bwd_storage_bytes<BwdShape<D, false, true>>();
  return lock_step > staggered ? lock_step : staggered;
}

}  // namespace flashattn::cuda::sm90
