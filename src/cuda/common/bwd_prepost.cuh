// The two element-wise kernels around the backward main kernel, both bound by memory: 16-byte
// loads and stores where the operands allow (bwd_prepost_vector_ok), else element by element.
//   bwd_preprocess: a few lanes per (query row, head): D = dot(dO, O) in fp32, lse in log2
//     units (+inf for a row without keys: its P is exp2(s - inf) = 0, never NaN), and the row's
//     fp32 dQ accumulator zeroed, every slice (the main kernel adds into it).
//   bwd_convert_dq: dq = scale * accumulator (its slices added in order), rounded to the
//     output type.
//   bwd_combine_dkv: with GQA split among blocks (BwdWorkspace::kv_splits), dk and dv = the
//     splits' fp32 partials added in split order, rounded to the output type.
// Rows are the packed query rows (b * seqlen_q + i when dense, cu_seqlens_q-relative when
// varlen); `RowMap` turns one into an operand offset.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/prim/math.cuh"

namespace flashattn::cuda {

struct RowMap {
  int seqlen;  // dense: rows per batch entry; 0: packed (varlen)
  __device__ __forceinline__ int64_t offset(const core::Operand& op, int64_t r, int head) const {
    if (seqlen == 0) return r * op.row_stride + head * op.head_stride;
    return (r / seqlen) * op.batch_stride + (r % seqlen) * op.row_stride + head * op.head_stride;
  }
};

// Whether the element-wise kernels may move 8 elements (16 bytes) at a time: out, dout and dq
// 16-byte aligned with strides in whole 8-element chunks, the head dims multiples of 8, and the
// fp32 accumulator 16-byte aligned. Otherwise they go element by element.
inline bool bwd_prepost_vector_ok(const core::BackwardParams& p, const BwdWorkspace& w) {
  const auto aligned = [&](const core::Operand& op) {
    return reinterpret_cast<uintptr_t>(op.ptr) % 16 == 0 && op.row_stride % 8 == 0 &&
           op.head_stride % 8 == 0 && op.batch_stride % 8 == 0;
  };
  return aligned(p.out) && aligned(p.dout) && aligned(p.dq) && p.head_dim % 8 == 0 &&
         p.head_dim_v % 8 == 0 && reinterpret_cast<uintptr_t>(w.dq_accum) % 16 == 0;
}

// Lanes of a warp that share one (row, head) in bwd_preprocess: enough 16-byte chunks to cover
// the row once (a power of two up to 32), or the whole warp element by element.
inline int bwd_preprocess_lanes(const core::BackwardParams& p, bool vector) {
  int lanes = 1;
  while (vector && lanes < 32 && lanes * 8 < p.head_dim_v) lanes *= 2;
  return vector ? lanes : 32;
}

// Eight 16-bit elements as fp32.
template <class T>
__device__ __forceinline__ void load8(const T* src, float (&x)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) x[k] = static_cast<float>(e[k]);
}

// `lanes` lanes per (row, head) pair (bwd_preprocess_lanes), 32 / lanes pairs per warp.
template <class T, bool kVector>
__global__ void bwd_preprocess(const __grid_constant__ core::BackwardParams p, RowMap rows,
                               BwdWorkspace w, int lanes) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr int kWidth = kVector ? 8 : 1;    // elements of dO and O per load
  constexpr int kZeros = kVector ? 4 : 1;    // accumulator floats per store
  const int lane = threadIdx.x % 32;
  const int sub = lane % lanes;
  const int per_warp = 32 / lanes;
  const int64_t pairs = static_cast<int64_t>(p.total_q) * p.nheads;
  const int64_t warp = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32) * per_warp;
  // The loop bound is the warp's: every lane reaches the shuffles.
  for (int64_t first = warp * per_warp; first < pairs; first += stride) {
    const int64_t i = first + lane / lanes;
    const bool valid = i < pairs;
    const int64_t r = i / p.nheads;
    const int h = static_cast<int>(i % p.nheads);
    float dot = 0.f;
    if (valid) {
      const T* dout = static_cast<const T*>(p.dout.ptr) + rows.offset(p.dout, r, h);
      const T* out = static_cast<const T*>(p.out.ptr) + rows.offset(p.out, r, h);
      for (int c = sub * kWidth; c < p.head_dim_v; c += lanes * kWidth) {
        if constexpr (kVector) {
          float a[8], o[8];
          load8(dout + c, a);
          load8(out + c, o);
#pragma unroll
          for (int k = 0; k < 8; ++k) dot = fmaf(a[k], o[k], dot);
        } else {
          dot += static_cast<float>(dout[c]) * static_cast<float>(out[c]);
        }
      }
    }
    for (int s = lanes / 2; s >= 1; s /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, s);
    if (!valid) continue;
    for (int slice = 0; slice < 1 << w.dq_slice_bits; ++slice) {
      float* accum = w.dq_accum + (slice * pairs + i) * p.head_dim;
      for (int c = sub * kZeros; c < p.head_dim; c += lanes * kZeros) {
        if constexpr (kVector) {
          *reinterpret_cast<float4*>(accum + c) = make_float4(0.f, 0.f, 0.f, 0.f);
        } else {
          accum[c] = 0.f;
        }
      }
    }
    if (sub == 0) {
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

// One thread per 8 elements (kVector) or per element.
template <class T, bool kVector>
__global__ void bwd_convert_dq(const __grid_constant__ core::BackwardParams p, RowMap rows,
                               const BwdWorkspace w) {
  const float* accum = w.dq_accum;
  const int64_t slice_floats = static_cast<int64_t>(p.total_q) * p.nheads * p.head_dim;
  constexpr int kWidth = kVector ? 8 : 1;
  const int64_t total = static_cast<int64_t>(p.total_q) * p.nheads * p.head_dim / kWidth;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i * kWidth;
    const int c = static_cast<int>(e % p.head_dim);
    const int64_t pair = e / p.head_dim;
    const int h = static_cast<int>(pair % p.nheads);
    const int64_t r = pair / p.nheads;
    T* dq = static_cast<T*>(p.dq.ptr) + rows.offset(p.dq, r, h) + c;
    if constexpr (kVector) {
      float4 lo = *reinterpret_cast<const float4*>(accum + e);
      float4 hi = *reinterpret_cast<const float4*>(accum + e + 4);
      if (w.dq_slice_bits != 0) {
        const float4 lo1 = *reinterpret_cast<const float4*>(accum + slice_floats + e);
        const float4 hi1 = *reinterpret_cast<const float4*>(accum + slice_floats + e + 4);
        lo = make_float4(lo.x + lo1.x, lo.y + lo1.y, lo.z + lo1.z, lo.w + lo1.w);
        hi = make_float4(hi.x + hi1.x, hi.y + hi1.y, hi.z + hi1.z, hi.w + hi1.w);
      }
      uint4 packed;
      packed.x = prim::thread::pack2<T>(lo.x * p.scale, lo.y * p.scale);
      packed.y = prim::thread::pack2<T>(lo.z * p.scale, lo.w * p.scale);
      packed.z = prim::thread::pack2<T>(hi.x * p.scale, hi.y * p.scale);
      packed.w = prim::thread::pack2<T>(hi.z * p.scale, hi.w * p.scale);
      *reinterpret_cast<uint4*>(dq) = packed;
    } else {
      const float sum = w.dq_slice_bits != 0 ? accum[e] + accum[slice_floats + e] : accum[e];
      *dq = static_cast<T>(sum * p.scale);
    }
  }
}

// One thread per element of dk and of dv; `rows` maps the kv rows (RowMap over seqlen_k).
template <class T>
__global__ void bwd_combine_dkv(const __grid_constant__ core::BackwardParams p, RowMap rows,
                                const BwdWorkspace w) {
  const int64_t total = w.kv_stride;  // kv rows x nheads_k x head_dim
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(e % p.head_dim);
    const int64_t pair = e / p.head_dim;
    const int hk = static_cast<int>(pair % p.nheads_k);
    const int64_t r = pair / p.nheads_k;
    float dk = 0.f, dv = 0.f;
    for (int s = 0; s < w.kv_splits; ++s) {
      dk += w.dk_partial[s * total + e];
      dv += w.dv_partial[s * total + e];
    }
    static_cast<T*>(p.dk.ptr)[rows.offset(p.dk, r, hk) + c] = static_cast<T>(dk);
    static_cast<T*>(p.dv.ptr)[rows.offset(p.dv, r, hk) + c] = static_cast<T>(dv);
  }
}

}  // namespace flashattn::cuda
