// Host entry points of the sm80 forward kernels, one per (element type, head dim); each is
// defined in a generated file of src/cuda/instantiations/ (scripts/codegen.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda/forward_tuning.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm80 {

// The dispatch's view of the family (forward.cu): it runs on every device from sm_80 on, any
// layout the API lets through (16-byte aligned, as the plan ensures), and its block of
// queries for head dim D.
inline constexpr bool kFwdNeedsSm90a = false;
inline constexpr FwdKernel kFwdKernel = FwdKernel::kSm80;
inline bool forward_accepts(const core::AttentionParams&) { return true; }
template <int D>
constexpr int forward_block_m() {
  return fwd_sm80_tile(D).block_m;
}

// Launches the forward for `params`, whose head dim is exactly D, on `stream`. Inputs must
// be 16-byte aligned with row/head/batch strides that are multiples of 8 elements. kDropout:
// the instantiation with dropout (params.dropout_p > 0); the other ignores dropout.
template <class T, int D, bool kDropout>
Status run_forward(const core::AttentionParams& params, cudaStream_t stream);

// Dynamic shared memory the kernel for head dim D needs per block.
template <class T, int D>
int forward_smem_bytes();

// The same kernel (without dropout) reading K and V through the block_table of a paged KV
// cache: `params` after the append, seqused_k set to the keys of each entry, no
// cache_batch_idx or cache_leftpad. Its shared memory per block. The dispatch's view
// (forward_paged.cu): it addresses a row with 32-bit strides (common/key_source.cuh), so the
// page stride and a page's span of rows must fit an int.
inline bool forward_paged_accepts(const core::KVCacheParams& p) {
  constexpr int64_t kMax = 2147483647;
  const auto fits = [&](const core::Operand& cache) {
    return cache.batch_stride <= kMax && cache.row_stride * p.page_size <= kMax;
  };
  return fits(p.k) && fits(p.v);
}
template <int D>
constexpr int forward_paged_block_m() {
  return fwd_sm80_tile(D).block_m;
}

template <class T, int D>
Status run_forward_paged(const core::KVCacheParams& params, cudaStream_t stream);

template <class T, int D>
int forward_paged_smem_bytes();

}  // namespace flashattn::cuda::sm80
