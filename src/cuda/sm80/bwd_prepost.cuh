// The two element-wise kernels around the backward main kernel.
//   bwd_preprocess: one warp per (query row, head): D = dot(dO, O) in fp32, lse in log2 units
//     (+inf for a row without keys: its P is exp2(s - inf) = 0, never NaN), and the row's fp32
//     dQ accumulator zeroed (the main kernel adds into it).
//   bwd_convert_dq: dq = scale * accumulator, rounded to the output type.
// Rows are the packed query rows (b * seqlen_q + i when dense, cu_seqlens_q-relative when
// varlen); `RowMap` turns one into an operand offset.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"

namespace flashattn::cuda::sm80 {

struct RowMap {
  int seqlen;  // dense: rows per batch entry; 0: packed (varlen)
  __device__ __forceinline__ int64_t offset(const core::Operand& op, int64_t r, int head) const {
    if (seqlen == 0) return r * op.row_stride + head * op.head_stride;
    return (r / seqlen) * op.batch_stride + (r % seqlen) * op.row_stride + head * op.head_stride;
  }
};

template <class T>
__global__ void bwd_preprocess(const __grid_constant__ core::BackwardParams p, RowMap rows,
                               BwdWorkspace w) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int lane = threadIdx.x % 32;
  const int64_t pairs = static_cast<int64_t>(p.total_q) * p.nheads;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
       i < pairs; i += warps) {
    const int64_t r = i / p.nheads;
    const int h = static_cast<int>(i % p.nheads);
    const T* dout = static_cast<const T*>(p.dout.ptr) + rows.offset(p.dout, r, h);
    const T* out = static_cast<const T*>(p.out.ptr) + rows.offset(p.out, r, h);
    float dot = 0.f;
    for (int c = lane; c < p.head_dim_v; c += 32) {
      dot += static_cast<float>(dout[c]) * static_cast<float>(out[c]);
    }
#pragma unroll
    for (int s = 16; s >= 1; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    float* accum = w.dq_accum + i * p.head_dim;
    for (int c = lane; c < p.head_dim; c += 32) accum[c] = 0.f;
    if (lane == 0) {
      const int64_t lse_index =
          rows.seqlen == 0 ? h * p.lse_head_stride + r
                           : (r / rows.seqlen) * p.lse_batch_stride + h * p.lse_head_stride +
                                 r % rows.seqlen;
      const float lse = p.lse[lse_index];
      w.dsum[h * static_cast<int64_t>(p.total_q) + r] = dot;
      w.lse_log2[h * static_cast<int64_t>(p.total_q) + r] =
          lse == -CUDART_INF_F ? CUDART_INF_F : lse * kLog2e;
    }
  }
}

template <class T>
__global__ void bwd_convert_dq(const __grid_constant__ core::BackwardParams p, RowMap rows,
                               const float* accum) {
  const int64_t total = static_cast<int64_t>(p.total_q) * p.nheads * p.head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % p.head_dim);
    const int64_t pair = i / p.head_dim;
    const int h = static_cast<int>(pair % p.nheads);
    const int64_t r = pair / p.nheads;
    static_cast<T*>(p.dq.ptr)[rows.offset(p.dq, r, h) + c] = static_cast<T>(accum[i] * p.scale);
  }
}

}  // namespace flashattn::cuda::sm80
