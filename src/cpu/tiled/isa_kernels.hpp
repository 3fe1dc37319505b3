// The KernelSet of one ISA build: the block kernels behind a dtype switch. Included by
// exactly one translation unit per ISA (isa_generic.cpp, isa_avx2.cpp, isa_avx512.cpp,
// isa_avx512_bf16.cpp, isa_amx.cpp, and the emulated builds of the tests).
#pragma once

#include "cpu/tiled/backward_kernels.hpp"
#include "cpu/tiled/forward_kernels.hpp"
#include "cpu/tiled/kvcache_kernels.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Calls Kernel<dtype>::run(args...) for the call's element type (the backward's).
template <template <ElementType> class Kernel, typename... Args>
void for_dtype(ElementType type, Args&&... args) {
  switch (type) {
    case ElementType::kF32: Kernel<ElementType::kF32>::run(args...); return;
    case ElementType::kF16: Kernel<ElementType::kF16>::run(args...); return;
    case ElementType::kBF16: Kernel<ElementType::kBF16>::run(args...); return;
    case ElementType::kF8E4M3: return;  // e4m3 has no backward (validation rejects it)
  }
}

// Calls Kernel<OperandTypes<...>>::run(args...) for the operand types of a forward or
// KV-cache call: one dtype throughout, e4m3 q, k and v with a 16-bit output (the forward),
// or an e4m3 cache read by queries of the output's type (a KV cache).
template <template <class> class Kernel, typename... Args>
void for_operand_types(const core::AttentionParams& p, Args&&... args) {
  constexpr ElementType F32 = ElementType::kF32, F16 = ElementType::kF16,
                        BF16 = ElementType::kBF16, E4M3 = ElementType::kF8E4M3;
  if (p.q_e4m3) {
    if (p.dtype == BF16) return Kernel<OperandTypes<E4M3, E4M3, BF16>>::run(args...);
    return Kernel<OperandTypes<E4M3, E4M3, F16>>::run(args...);
  }
  if (p.kv_e4m3) {
    switch (p.dtype) {
      case F32: return Kernel<OperandTypes<F32, E4M3, F32>>::run(args...);
      case F16: return Kernel<OperandTypes<F16, E4M3, F16>>::run(args...);
      default: return Kernel<OperandTypes<BF16, E4M3, BF16>>::run(args...);
    }
  }
  switch (p.dtype) {
    case F32: return Kernel<OperandTypes<F32>>::run(args...);
    case F16: return Kernel<OperandTypes<F16>>::run(args...);
    default: return Kernel<OperandTypes<BF16>>::run(args...);
  }
}

template <class Types>
struct ForwardBlock {
  static void run(const core::AttentionParams& params, int b, int h, int row0, int rows,
                  float* s) {
    if constexpr (Types::q == Types::kv) forward_block<Types>(params, b, h, row0, rows, s);
  }
};
template <ElementType Type>
struct DkDvBlock {
  static void run(const core::BackwardParams& params, int b, int hk, int k_block, int blocks,
                  float* s) {
    backward_dkdv_block<Type>(params, b, hk, k_block, blocks, s);
  }
};
template <ElementType Type>
struct DqBlock {
  static void run(const core::BackwardParams& params, int b, int h, int q_block, int blocks,
                  float* s) {
    backward_dq_block<Type>(params, b, h, q_block, blocks, s);
  }
};
template <ElementType Type>
struct OnePassBackward {
  static void run(const core::BackwardParams& params, int b, int hk, float* s) {
    backward_one_pass<Type>(params, b, hk, s);
  }
};
template <class Types>
struct KVCacheBlock {
  static void run(const core::KVCacheParams& params, const SplitPartials& partials, int b,
                  int hk, int row0, int rows, int split, float* s) {
    // e4m3 queries never reach a KV-cache call (validation).
    if constexpr (Types::q != ElementType::kF8E4M3) {
      kvcache_block<Types>(params, partials, b, hk, row0, rows, split, s);
    }
  }
};

inline KernelSet make_kernel_set(const char* name) {
  KernelSet set;
  set.isa = name;
  set.block_q = kBlockQ;
  set.max_group = kGroupQ;
  set.backward_rows = kBlockQ;
  set.backward_keys = kBlockK;
  set.backward_group = kGroupB;
  set.block_k = kBlockK;
  set.forward_scratch_floats = forward_scratch_floats;
  set.backward_scratch_floats = backward_scratch_floats;
  set.kvcache_scratch_floats = kvcache_scratch_floats;
  set.backward_one_pass_scratch_floats = backward_one_pass_scratch_floats;
  set.forward_block = [](const core::AttentionParams& p, int b, int h, int row0, int rows,
                         float* s) { for_operand_types<ForwardBlock>(p, p, b, h, row0, rows, s); };
  set.backward_dkdv_block = [](const core::BackwardParams& p, int b, int hk, int k_block,
                               int blocks, float* s) {
    for_dtype<DkDvBlock>(p.dtype, p, b, hk, k_block, blocks, s);
  };
  set.backward_dq_block = [](const core::BackwardParams& p, int b, int h, int q_block,
                             int blocks, float* s) {
    for_dtype<DqBlock>(p.dtype, p, b, h, q_block, blocks, s);
  };
  set.backward_one_pass = [](const core::BackwardParams& p, int b, int hk, float* s) {
    for_dtype<OnePassBackward>(p.dtype, p, b, hk, s);
  };
  set.kvcache_block = [](const core::KVCacheParams& p, const SplitPartials& partials, int b,
                         int hk, int row0, int rows, int split, float* s) {
    for_operand_types<KVCacheBlock>(p, p, partials, b, hk, row0, rows, split, s);
  };
  return set;
}

// The KernelSet of a build whose only difference from Base() is its bf16 products: bf16
// calls run this build's kernels, fp32 and fp16 calls Base()'s, so those are compiled
// once. Base must have this build's vector width, hence the same block sizes
// (tile_config.hpp), which the drivers read from the set.
#if FA_TILED_BF16 != FA_TILED_BF16_NONE
// A call whose operands are all bf16 (FP8 calls run Base()'s fp32 tiles).
inline bool bf16_call(const core::AttentionParams& p) {
  return p.dtype == ElementType::kBF16 && !p.has_fp8();
}

template <const KernelSet& (*Base)()>
KernelSet make_bf16_kernel_set(const char* name) {
  KernelSet set = Base();
  set.isa = name;
  set.forward_scratch_floats = [](const core::AttentionParams& p) {
    return bf16_call(p) ? forward_scratch_floats(p) : Base().forward_scratch_floats(p);
  };
  set.backward_scratch_floats = [](const core::BackwardParams& p) {
    return p.dtype == ElementType::kBF16 ? backward_scratch_floats(p)
                                         : Base().backward_scratch_floats(p);
  };
  set.kvcache_scratch_floats = [](const core::KVCacheParams& p) {
    return bf16_call(p) ? kvcache_scratch_floats(p) : Base().kvcache_scratch_floats(p);
  };
  set.backward_one_pass_scratch_floats = [](const core::BackwardParams& p) {
    return p.dtype == ElementType::kBF16 ? backward_one_pass_scratch_floats(p)
                                         : Base().backward_one_pass_scratch_floats(p);
  };
  set.forward_block = [](const core::AttentionParams& p, int b, int h, int row0, int rows,
                         float* s) {
    if (!bf16_call(p)) return Base().forward_block(p, b, h, row0, rows, s);
    forward_block<OperandTypes<ElementType::kBF16>>(p, b, h, row0, rows, s);
  };
  set.backward_dkdv_block = [](const core::BackwardParams& p, int b, int hk, int k_block,
                               int blocks, float* s) {
    if (p.dtype != ElementType::kBF16) {
      return Base().backward_dkdv_block(p, b, hk, k_block, blocks, s);
    }
    backward_dkdv_block<ElementType::kBF16>(p, b, hk, k_block, blocks, s);
  };
  set.backward_dq_block = [](const core::BackwardParams& p, int b, int h, int q_block,
                             int blocks, float* s) {
    if (p.dtype != ElementType::kBF16) return Base().backward_dq_block(p, b, h, q_block, blocks, s);
    backward_dq_block<ElementType::kBF16>(p, b, h, q_block, blocks, s);
  };
  set.backward_one_pass = [](const core::BackwardParams& p, int b, int hk, float* s) {
    if (p.dtype != ElementType::kBF16) return Base().backward_one_pass(p, b, hk, s);
    backward_one_pass<ElementType::kBF16>(p, b, hk, s);
  };
  set.kvcache_block = [](const core::KVCacheParams& p, const SplitPartials& partials, int b,
                         int hk, int row0, int rows, int split, float* s) {
    if (!bf16_call(p)) return Base().kvcache_block(p, partials, b, hk, row0, rows, split, s);
    kvcache_block<OperandTypes<ElementType::kBF16>>(p, partials, b, hk, row0, rows, split, s);
  };
  return set;
}
#endif

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
