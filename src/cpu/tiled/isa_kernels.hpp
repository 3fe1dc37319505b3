// The KernelSet of one ISA build: the block kernels behind a dtype switch. Included by
// exactly one translation unit per ISA (isa_generic.cpp, isa_avx2.cpp, isa_avx512.cpp).
#pragma once

#include "cpu/tiled/backward_kernels.hpp"
#include "cpu/tiled/forward_kernels.hpp"
#include "cpu/tiled/kvcache_kernels.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Calls Kernel<dtype>::run(args...) for the call's element type.
template <template <ElementType> class Kernel, typename... Args>
void for_dtype(ElementType type, Args&&... args) {
  switch (type) {
    case ElementType::kF32: Kernel<ElementType::kF32>::run(args...); return;
    case ElementType::kF16: Kernel<ElementType::kF16>::run(args...); return;
    case ElementType::kBF16: Kernel<ElementType::kBF16>::run(args...); return;
  }
}

template <ElementType Type>
struct ForwardBlock {
  static void run(const core::AttentionParams& params, int b, int h, int row0, int rows,
                  float* s) {
    forward_block<Type>(params, b, h, row0, rows, s);
  }
};
template <ElementType Type>
struct DkDvBlock {
  static void run(const core::BackwardParams& params, int b, int hk, int k_block, float* s) {
    backward_dkdv_block<Type>(params, b, hk, k_block, s);
  }
};
template <ElementType Type>
struct DqBlock {
  static void run(const core::BackwardParams& params, int b, int h, int q_block, float* s) {
    backward_dq_block<Type>(params, b, h, q_block, s);
  }
};
template <ElementType Type>
struct KVCacheBlock {
  static void run(const core::KVCacheParams& params, const SplitPartials& partials, int b,
                  int hk, int row0, int rows, int split, float* s) {
    kvcache_block<Type>(params, partials, b, hk, row0, rows, split, s);
  }
};

inline KernelSet make_kernel_set(const char* name) {
  KernelSet set;
  set.isa = name;
  set.block_q = kBlockQ;
  set.max_group = kGroupQ;
  set.backward_rows = kBlockQ;
  set.backward_keys = kBlockK;
  set.block_k = kBlockK;
  set.forward_scratch_floats = forward_scratch_floats;
  set.backward_scratch_floats = backward_scratch_floats;
  set.kvcache_scratch_floats = kvcache_scratch_floats;
  set.forward_block = [](const core::AttentionParams& p, int b, int h, int row0, int rows,
                         float* s) { for_dtype<ForwardBlock>(p.dtype, p, b, h, row0, rows, s); };
  set.backward_dkdv_block = [](const core::BackwardParams& p, int b, int hk, int k_block,
                               float* s) { for_dtype<DkDvBlock>(p.dtype, p, b, hk, k_block, s); };
  set.backward_dq_block = [](const core::BackwardParams& p, int b, int h, int q_block,
                             float* s) { for_dtype<DqBlock>(p.dtype, p, b, h, q_block, s); };
  set.kvcache_block = [](const core::KVCacheParams& p, const SplitPartials& partials, int b,
                         int hk, int row0, int rows, int split, float* s) {
    for_dtype<KVCacheBlock>(p.dtype, p, partials, b, hk, row0, rows, split, s);
  };
  return set;
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
