// The tuners' benchmark problem: bf16, `tokens` rows of `hidden` columns split into heads of
// d, sequences of `seqlen` (batch = tokens / seqlen), the layout flashattn-bench times; and the
// device buffers the input sets rotate over.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/params.hpp"

namespace fa_tune_problem {

inline bool check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::printf("CUDA error (%s): %s\n", what, cudaGetErrorString(e));
  return e == cudaSuccess;
}

// `count` device buffers of tokens x hidden bf16 values, one random fill shared by all:
// distinct addresses are what keeps the rotation out of the L2; the values only need to be
// realistic. Empty on failure (the error is printed).
inline std::vector<void*> random_buffers(int tokens, int hidden, int count) {
  const size_t elems = static_cast<size_t>(tokens) * hidden;
  std::vector<__nv_bfloat16> host(elems);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (auto& x : host) x = __float2bfloat16(normal(rng));
  std::vector<void*> buffers(count, nullptr);
  for (void*& b : buffers) {
    if (!check(cudaMalloc(&b, elems * 2), "malloc") ||
        !check(cudaMemcpy(b, host.data(), elems * 2, cudaMemcpyHostToDevice), "copy")) {
      return {};
    }
  }
  return buffers;
}

// The shape, scale, mask and lse fields of the problem (operands are bound per input set).
inline void set_dense(flashattn::core::AttentionParams* p, int tokens, int hidden, int d,
                      int seqlen, bool causal, float* lse) {
  const int h = hidden / d;
  p->dtype = flashattn::core::ElementType::kBF16;
  p->batch = tokens / seqlen;
  p->nheads = p->nheads_k = h;
  p->head_dim = p->head_dim_v = d;
  p->seqlen_q = p->seqlen_k = seqlen;
  p->total_q = tokens;
  p->scale = 1.f / std::sqrt(static_cast<float>(d));
  p->scale_log2 = p->scale * 1.4426950408889634f;
  p->window_right = causal ? 0 : -1;
  p->lse = lse;
  p->lse_head_stride = seqlen;
  p->lse_batch_stride = static_cast<int64_t>(h) * seqlen;
}

// Points `op` at a [batch][seqlen][heads][d] buffer of the problem.
inline void bind(flashattn::core::Operand* op, void* buffer, int hidden, int d, int seqlen) {
  op->ptr = buffer;
  op->head_stride = d;
  op->row_stride = hidden;
  op->batch_stride = static_cast<int64_t>(hidden) * seqlen;
}

}  // namespace fa_tune_problem
