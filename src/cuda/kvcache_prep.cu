#include "cuda/kvcache_prep.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/numeric.hpp"
#include "core/sequence.hpp"
#include "core/softmax_state.hpp"
#include "cuda/check.hpp"
#include "cuda/kvcache_address.cuh"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 128;

// Element c of row `x` rotated to absolute position `position` (SPEC.md: pairs (2i, 2i+1)
// when interleaved, (i, i + rotary_dim/2) otherwise). Computed in double and rounded once,
// as the reference does: the appended keys are then bit-identical to its cache.
template <class T>
__device__ double rotated(const core::KVCacheParams& p, const T* x, int c, int position) {
  const double value = static_cast<double>(static_cast<float>(x[c]));
  if (p.rotary_cos == nullptr || c >= p.rotary_dim) return value;
  const int half = p.rotary_dim / 2;
  int i, first, second;
  if (p.rotary_interleaved) {
    i = c / 2;
    first = c & ~1;
    second = c | 1;
  } else {
    i = c < half ? c : c - half;
    first = i;
    second = i + half;
  }
  const int64_t at = static_cast<int64_t>(position) * p.rotary_row_stride + i;
  const double cs = static_cast<float>(static_cast<const T*>(p.rotary_cos)[at]);
  const double sn = static_cast<float>(static_cast<const T*>(p.rotary_sin)[at]);
  const double x0 = static_cast<float>(x[first]);
  const double x1 = static_cast<float>(x[second]);
  return c == first ? x0 * cs - x1 * sn : x0 * sn + x1 * cs;
}

// What a cache of element type C stores for an appended value: the value rounded to T, or
// in an e4m3 cache value / descale rounded by the CPU backends' own functions (nearest even,
// saturating at 448), so that every backend leaves the same bytes in the cache.
template <class T, class C>
__device__ __forceinline__ C cache_value(float value, float descale) {
  if constexpr (std::is_same_v<C, __nv_fp8_e4m3>) {
    C stored;
    stored.__x = core::float_to_e4m3(core::appended_value(value, true, descale));
    return stored;
  } else {
    return static_cast<T>(value);
  }
}

// Block (b * seqlen_new + t, kv head): one appended row of K and of V, into a cache of
// element type C (T, or __nv_fp8_e4m3).
template <class T, class C>
__global__ void append_kernel(const __grid_constant__ core::KVCacheParams p) {
  const int b = blockIdx.x / p.seqlen_new;
  const int t = blockIdx.x % p.seqlen_new;
  const int hk = blockIdx.y;
  const int position = p.cache_seqlens[b] + t;
  const int64_t k_dst = cache_position_offset(p, p.k, b, position, hk);
  const int64_t v_dst = cache_position_offset(p, p.v, b, position, hk);
  const T* k_src = static_cast<const T*>(p.k_new.ptr) + core::element_offset(p.k_new, b, t, hk);
  const T* v_src = static_cast<const T*>(p.v_new.ptr) + core::element_offset(p.v_new, b, t, hk);
  C* k_cache = static_cast<C*>(p.k.ptr) + k_dst;
  C* v_cache = static_cast<C*>(p.v.ptr) + v_dst;
  const float k_descale = p.k_descale.at(b, hk), v_descale = p.v_descale.at(b, hk);
  // Every thread reads its pair before any thread writes: k_new may not alias the cache
  // (the API's inputs are distinct tensors), so one pass is enough.
  for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) {
    k_cache[c] =
        cache_value<T, C>(static_cast<float>(rotated(p, k_src, c, position)), k_descale);
  }
  for (int c = threadIdx.x; c < p.head_dim_v; c += blockDim.x) {
    v_cache[c] = cache_value<T, C>(static_cast<float>(v_src[c]), v_descale);
  }
}

// Block (b * seqlen_q + i, head): query row i at its rotary position (FlashAttention-2: every
// row at cache_seqlens[b] unless a causal or window mask sets row i at + i).
template <class T>
__global__ void stage_q_kernel(const __grid_constant__ core::KVCacheParams p, T* staged) {
  const int b = blockIdx.x / p.seqlen_q;
  const int i = blockIdx.x % p.seqlen_q;
  const int h = blockIdx.y;
  const bool positional = p.window_left >= 0 || p.window_right >= 0;  // causal included
  // No cache_seqlens: the dense forward's decode route, which has no rotary.
  const int cached = p.cache_seqlens != nullptr ? p.cache_seqlens[b] : 0;
  const int position = cached + (positional ? i : 0);
  const T* src = static_cast<const T*>(p.q.ptr) + core::element_offset(p.q, b, i, h);
  T* dst = staged + ((static_cast<int64_t>(b) * p.seqlen_q + i) * p.nheads + h) * p.head_dim;
  for (int c = threadIdx.x; c < p.head_dim; c += blockDim.x) {
    dst[c] = static_cast<T>(static_cast<float>(rotated(p, src, c, position)));
  }
}

__global__ void used_keys_kernel(const int32_t* cache_seqlens, int appended, int batch,
                                 int32_t* used_keys) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < batch) used_keys[b] = cache_seqlens[b] + appended;
}

// One block per (b, h, i) row. Warp w sums the splits w, w + 4, ... of the row, four
// columns per lane and 16-byte load (launch_combine checks the alignment); the loads of its
// first kPrefetch splits are issued before the splits' lse are merged, so that the row's
// partials and lse arrive in one round trip. Every warp loads all the lse (lane l: splits l,
// l + 32, ...) and merges them by a butterfly of core::log_add_exp (symmetric, so every lane
// ends with the same total); a split's weight exp(lse_s - lse) (core::merge_weight) comes from
// the lane holding its lse. The warps' sums meet in shared memory.
template <class T>
__global__ void __launch_bounds__(kThreads)
    combine_kernel(const __grid_constant__ core::KVCacheParams p, int num_splits,
                   const float* partial_out, const float* partial_lse) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kMaxKvSplits % 32 == 0, "whole lse slots per lane");
  constexpr int kLseSlots = kMaxKvSplits / 32;  // per lane
  constexpr int kPrefetch = 8;                  // splits per warp whose loads are in flight
  constexpr int kVec = 4;
  constexpr int kPasses = core::kMaxHeadDim / (32 * kVec);  // column passes of a warp, at most
  __shared__ float sums[kWarps][core::kMaxHeadDim];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A dependent launch starts before the attention kernel ends: wait for its partials (a
  // no-op when launched the ordinary way).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nheads * p.seqlen_q;
  const int64_t row = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int head_dim = p.head_dim;
  const int64_t split_stride = rows * head_dim;
  const float* part = partial_out + row * head_dim;
  auto load = [&](int s, int c) -> float4 {
    return *reinterpret_cast<const float4*>(part + s * split_stride + c);
  };

  // This warp's first kPrefetch splits, every column pass, in flight with the lse loads.
  float4 first[kPrefetch][kPasses];
#pragma unroll
  for (int k = 0; k < kPrefetch; ++k) {
    const int s = warp + kWarps * k;
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int c = kVec * (lane + 32 * j);
      if (s < num_splits && c < head_dim) first[k][j] = load(s, c);
    }
  }
  float lse[kLseSlots];
  float total = -INFINITY;
#pragma unroll
  for (int i = 0; i < kLseSlots; ++i) {
    const int s = lane + 32 * i;
    lse[i] = s < num_splits ? partial_lse[s * rows + row] : -INFINITY;
    total = core::log_add_exp(total, lse[i]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    total = core::log_add_exp(total, __shfl_xor_sync(0xffffffffu, total, offset));
  }
  // Split s's weight, from lane s % 32 (s is the same in every lane).
  auto weight = [&](int s) {
    const int slot = s / 32;
    float l = lse[0];
#pragma unroll
    for (int i = 1; i < kLseSlots; ++i) l = slot == i ? lse[i] : l;
    return core::merge_weight(__shfl_sync(0xffffffffu, l, s % 32), total);
  };

  float acc[kPasses][kVec];
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[j][e] = 0.f;
  }
  auto add = [&](float w, const float4& v, int j) {
    acc[j][0] += w * v.x;
    acc[j][1] += w * v.y;
    acc[j][2] += w * v.z;
    acc[j][3] += w * v.w;
  };
#pragma unroll
  for (int k = 0; k < kPrefetch; ++k) {
    const int s = warp + kWarps * k;
    if (s >= num_splits) break;
    const float w = weight(s);
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      if (kVec * (lane + 32 * j) < head_dim) add(w, first[k][j], j);
    }
  }
  // Splits past the prefetched ones (more than kWarps * kPrefetch splits).
  for (int s = warp + kWarps * kPrefetch; s < num_splits; s += kWarps) {
    const float w = weight(s);
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int c = kVec * (lane + 32 * j);
      if (c < head_dim) add(w, load(s, c), j);
    }
  }
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int c = kVec * (lane + 32 * j) + e;
      if (c < head_dim) sums[warp][c] = acc[j][e];
    }
  }
  __syncthreads();

  const int i = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.nheads);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.nheads));
  T* out = static_cast<T*>(p.out.ptr) + core::element_offset(p.out, b, i, h);
  for (int c = static_cast<int>(threadIdx.x); c < head_dim; c += kThreads) {
    float sum = sums[0][c];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += sums[w][c];
    out[c] = static_cast<T>(sum);
  }
  if (p.lse != nullptr && threadIdx.x == 0) {
    p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = total;
  }
}

template <class Launch>
Status by_dtype(const core::KVCacheParams& p, Launch launch) {
  if (p.dtype == core::ElementType::kF16) return launch(__half{});
  return launch(__nv_bfloat16{});
}

}  // namespace

Status launch_append(const core::KVCacheParams& p, cudaStream_t stream) {
  if (p.k_new.ptr == nullptr || p.seqlen_new == 0 || p.batch == 0) return Status::Ok();
  return by_dtype(p, [&](auto zero) {
    using T = decltype(zero);
    const dim3 grid(p.batch * p.seqlen_new, p.nheads_k);
    if (p.kv_e4m3) {
      append_kernel<T, __nv_fp8_e4m3><<<grid, kThreads, 0, stream>>>(p);
    } else {
      append_kernel<T, T><<<grid, kThreads, 0, stream>>>(p);
    }
    return cuda_status(cudaGetLastError(), "launching the KV-cache append kernel");
  });
}

Status launch_stage_q(const core::KVCacheParams& p, void* staged, cudaStream_t stream) {
  if (p.batch == 0 || p.seqlen_q == 0) return Status::Ok();
  return by_dtype(p, [&](auto zero) {
    using T = decltype(zero);
    stage_q_kernel<T><<<dim3(p.batch * p.seqlen_q, p.nheads), kThreads, 0, stream>>>(
        p, static_cast<T*>(staged));
    return cuda_status(cudaGetLastError(), "launching the KV-cache query staging kernel");
  });
}

Status launch_used_keys(const core::KVCacheParams& p, int32_t* used_keys, cudaStream_t stream) {
  const int appended = p.k_new.ptr != nullptr ? p.seqlen_new : 0;
  used_keys_kernel<<<(p.batch + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      p.cache_seqlens, appended, p.batch, used_keys);
  return cuda_status(cudaGetLastError(), "launching the KV-cache key count kernel");
}

Status launch_combine(const core::KVCacheParams& p, int num_splits, const float* partial_out,
                      const float* partial_lse, bool dependent, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.nheads * p.seqlen_q;
  if (rows == 0) return Status::Ok();
  // The kernel loads four columns at a time: rows of whole 16-byte chunks (the kernels' head
  // dims are) in a workspace buffer at a 256-byte boundary (kvcache.cu).
  if (p.head_dim % 4 != 0 || reinterpret_cast<uintptr_t>(partial_out) % 16 != 0) {
    return Status(StatusCode::kInternal, "split-KV combine: partials not in 16-byte rows");
  }
  return by_dtype(p, [&](auto zero) {
    using T = decltype(zero);
    cudaLaunchAttribute overlap;
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(rows));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = &overlap;
    config.numAttrs = dependent ? 1 : 0;
    return cuda_status(
        cudaLaunchKernelEx(&config, combine_kernel<T>, p, num_splits, partial_out, partial_lse),
        "launching the split-KV combine kernel");
  });
}

}  // namespace flashattn::cuda
