// The KernelSet of one ISA build: the block kernels behind a dtype switch. Included by
// exactly one translation unit per ISA (isa_generic.cpp, isa_avx2.cpp, isa_avx512.cpp,
// isa_avx512_bf16.cpp, isa_amx.cpp, and the emulated builds of the tests).
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

// The KernelSet of a build whose only difference from Base() is its bf16 products: bf16
// calls run this build's kernels, fp32 and fp16 calls Base()'s, so those are compiled
// once. Base must have this build's vector width, hence the same block sizes
// (tile_config.hpp), which the drivers read from the set.
#if FA_TILED_BF16 != FA_TILED_BF16_NONE
template <const KernelSet& (*Base)()>
KernelSet make_bf16_kernel_set(const char* name) {
  KernelSet set = Base();
  set.isa = name;
  set.forward_scratch_floats = [](const core::AttentionParams& p) {
    return p.dtype == ElementType::kBF16 ? forward_scratch_floats(p)
                                         : Base().forward_scratch_floats(p);
  };
  set.backward_scratch_floats = [](const core::BackwardParams& p) {
    return p.dtype == ElementType::kBF16 ? backward_scratch_floats(p)
                                         : Base().backward_scratch_floats(p);
  };
  set.kvcache_scratch_floats = [](const core::KVCacheParams& p) {
    return p.dtype == ElementType::kBF16 ? kvcache_scratch_floats(p)
                                         : Base().kvcache_scratch_floats(p);
  };
  set.forward_block = [](const core::AttentionParams& p, int b, int h, int row0, int rows,
                         float* s) {
    if (p.dtype != ElementType::kBF16) return Base().forward_block(p, b, h, row0, rows, s);
    forward_block<ElementType::kBF16>(p, b, h, row0, rows, s);
  };
  set.backward_dkdv_block = [](const core::BackwardParams& p, int b, int hk, int k_block,
                               float* s) {
    if (p.dtype != ElementType::kBF16) return Base().backward_dkdv_block(p, b, hk, k_block, s);
    backward_dkdv_block<ElementType::kBF16>(p, b, hk, k_block, s);
  };
  set.backward_dq_block = [](const core::BackwardParams& p, int b, int h, int q_block,
                             float* s) {
    if (p.dtype != ElementType::kBF16) return Base().backward_dq_block(p, b, h, q_block, s);
    backward_dq_block<ElementType::kBF16>(p, b, h, q_block, s);
  };
  set.kvcache_block = [](const core::KVCacheParams& p, const SplitPartials& partials, int b,
                         int hk, int row0, int rows, int split, float* s) {
    if (p.dtype != ElementType::kBF16) {
      return Base().kvcache_block(p, partials, b, hk, row0, rows, split, s);
    }
    kvcache_block<ElementType::kBF16>(p, partials, b, hk, row0, rows, split, s);
  };
  return set;
}
#endif

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
