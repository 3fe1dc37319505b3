// The tile products of the bf16 kernels: C[rows x cols] (+)= A[rows x depth] * B[depth x
// cols], A and B in bf16 as bf16_operands.hpp packs them, C and the sums in fp32. The ISA
// build defines FA_TILED_BF16:
//   FA_TILED_BF16_DOT  AVX512-BF16: the register-blocked micro-kernel of gemm.hpp with
//                      VDPBF16PS (a pair of bf16 products per fp32 lane) in place of FMA;
//   FA_TILED_BF16_AMX  AMX: 16 x 16 fp32 tiles of C, 2 x 2 of them per block of C,
//                      accumulated by TDPBF16PS over 32-deep slices of A and B;
//   FA_TILED_BF16_NONE (default) no bf16 products: bf16 runs through the fp32 kernels.
// With FA_TILED_EMULATED the same code runs on portable arithmetic, so the packing and
// blocking are tested on any CPU.
#pragma once

#include "cpu/tiled/bf16_operands.hpp"
#include "cpu/tiled/gemm.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Whether this build multiplies calls of element type `Type` in bf16.
template <ElementType Type>
constexpr bool kBf16Products = Type == ElementType::kBF16 && FA_TILED_BF16 != FA_TILED_BF16_NONE;

// The fp32 value of the low and the high bf16 of each word.
inline VecF low_bf16(VecU words) { return (VecF)(words << 16); }
inline VecF high_bf16(VecU words) { return (VecF)(words & splat_u(0xFFFF0000u)); }

#if FA_TILED_BF16 == FA_TILED_BF16_DOT

// acc + a.low * b.low + a.high * b.high in every fp32 lane.
inline VecF dot_pairs(VecF acc, VecU a, VecU b) {
#if FA_TILED_EMULATED
  return acc + low_bf16(a) * low_bf16(b) + high_bf16(a) * high_bf16(b);
#else
  return (VecF)_mm512_dpbf16_ps((__m512)acc, (__m512bh)a, (__m512bh)b);
#endif
}

template <int Rows, int Vecs>
inline void dot_micro_kernel(int pairs, const uint16_t* a, int64_t lda, const uint32_t* b,
                             int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  VecF acc[Rows][Vecs];
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) {
      acc[m][v] = accumulate ? load(c + m * ldc + v * kLanes) : VecF{};
    }
  }
  for (int k = 0; k < pairs; ++k) {
    VecU bk[Vecs];
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) std::memcpy(&bk[v], b + k * ldb + v * kLanes, sizeof bk[v]);
#pragma GCC unroll 16
    for (int m = 0; m < Rows; ++m) {
      uint32_t pair;
      std::memcpy(&pair, a + m * lda + 2 * k, sizeof pair);
      const VecU am = splat_u(pair);
#pragma GCC unroll 16
      for (int v = 0; v < Vecs; ++v) acc[m][v] = dot_pairs(acc[m][v], am, bk[v]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) store(c + m * ldc + v * kLanes, acc[m][v]);
  }
}

// No tile state in this build.
struct Bf16ProductScope {
  explicit Bf16ProductScope(bool) {}
};

inline void gemm_bf16(int rows, int cols, int depth, const uint16_t* a, int64_t lda,
                      const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for_register_blocks(rows, cols / kLanes, [&](auto block_rows, auto vecs, int m0, int v0) {
    dot_micro_kernel<decltype(block_rows)::value, decltype(vecs)::value>(
        depth / 2, a + m0 * lda, lda, b + v0 * kLanes, ldb, c + m0 * ldc + v0 * kLanes, ldc,
        accumulate);
  });
}

#elif FA_TILED_BF16 == FA_TILED_BF16_AMX

#if FA_TILED_EMULATED
// The AMX instructions the kernels use, on eight tiles of plain memory per thread.
namespace amx_emulation {
struct Tile {
  unsigned char bytes[16][64];
};
inline Tile& tile(int t) {
  thread_local Tile tiles[8];
  return tiles[t];
}
inline void load(int t, const void* base, int64_t stride) {
  for (int r = 0; r < 16; ++r) {
    std::memcpy(tile(t).bytes[r], static_cast<const char*>(base) + r * stride, 64);
  }
}
inline void store(int t, void* base, int64_t stride) {
  for (int r = 0; r < 16; ++r) {
    std::memcpy(static_cast<char*>(base) + r * stride, tile(t).bytes[r], 64);
  }
}
inline void zero(int t) { std::memset(tile(t).bytes, 0, sizeof(Tile)); }
inline float bf16_value(uint32_t word, int half) {
  return core::bf16_to_float(static_cast<uint16_t>(word >> (16 * half)));
}
inline void dot(int c, int a, int b) {
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float sum;
      std::memcpy(&sum, tile(c).bytes[m] + 4 * n, 4);
      for (int k = 0; k < 16; ++k) {
        uint32_t aw, bw;
        std::memcpy(&aw, tile(a).bytes[m] + 4 * k, 4);
        std::memcpy(&bw, tile(b).bytes[k] + 4 * n, 4);
        sum += bf16_value(aw, 0) * bf16_value(bw, 0) + bf16_value(aw, 1) * bf16_value(bw, 1);
      }
      std::memcpy(tile(c).bytes[m] + 4 * n, &sum, 4);
    }
  }
}
}  // namespace amx_emulation
#define FA_TILE_LOAD(t, base, stride) amx_emulation::load(t, base, stride)
#define FA_TILE_STORE(t, base, stride) amx_emulation::store(t, base, stride)
#define FA_TILE_ZERO(t) amx_emulation::zero(t)
#define FA_TILE_DOT(c, a, b) amx_emulation::dot(c, a, b)
#define FA_TILE_CONFIGURE(config) static_cast<void>(config)
#define FA_TILE_RELEASE() static_cast<void>(0)
#else
// Written as assembly with a memory clobber: the compilers' AMX intrinsics do not tell
// them that a tile load reads memory, so the stores that pack an operand could be moved
// past it.
#define FA_TILE_LOAD(t, base, stride)                                                      \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"(static_cast<long>(stride)) \
                   : "memory")
#define FA_TILE_STORE(t, base, stride)                                                       \
  __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"(static_cast<long>(stride)) \
                   : "memory")
#define FA_TILE_ZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define FA_TILE_DOT(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define FA_TILE_CONFIGURE(config) __asm__ volatile("ldtilecfg %0" ::"m"(config))
#define FA_TILE_RELEASE() __asm__ volatile("tilerelease" ::)
#endif

// The tile configuration of a block function's products, loaded on entry and released on
// exit (another library in the process may configure the tiles differently between our
// calls): tiles 0-3 accumulate a 2 x 2 block of C, 4-5 hold A, 6-7 hold B, each 16 rows
// of 64 bytes. Nothing happens when the block runs no bf16 product (`active` false).
class Bf16ProductScope {
 public:
  explicit Bf16ProductScope(bool active) : active_(active) {
    if (!active_) return;
    struct alignas(64) Config {
      uint8_t palette;
      uint8_t start_row;
      uint8_t reserved[14];
      uint16_t bytes_per_row[16];
      uint8_t rows[16];
    } config{};
    config.palette = 1;
    for (int t = 0; t < 8; ++t) {
      config.bytes_per_row[t] = 64;
      config.rows[t] = 16;
    }
    FA_TILE_CONFIGURE(config);
  }
  ~Bf16ProductScope() {
    if (active_) FA_TILE_RELEASE();
  }
  Bf16ProductScope(const Bf16ProductScope&) = delete;
  Bf16ProductScope& operator=(const Bf16ProductScope&) = delete;

 private:
  bool active_;
};

// One block of MT x NT (1 or 2) C tiles at c, over the whole depth.
template <int MT, int NT>
inline void amx_block(int depth, const uint16_t* a, int64_t lda, const uint32_t* b,
                      int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int64_t a_stride = lda * sizeof(uint16_t), b_stride = ldb * sizeof(uint32_t);
  const int64_t c_stride = ldc * sizeof(float);
  float* c01 = c + 16;
  float* c10 = c + 16 * ldc;
  float* c11 = c10 + 16;
  if (accumulate) {
    FA_TILE_LOAD(0, c, c_stride);
    if constexpr (NT == 2) FA_TILE_LOAD(1, c01, c_stride);
    if constexpr (MT == 2) FA_TILE_LOAD(2, c10, c_stride);
    if constexpr (MT == 2 && NT == 2) FA_TILE_LOAD(3, c11, c_stride);
  } else {
    FA_TILE_ZERO(0);
    if constexpr (NT == 2) FA_TILE_ZERO(1);
    if constexpr (MT == 2) FA_TILE_ZERO(2);
    if constexpr (MT == 2 && NT == 2) FA_TILE_ZERO(3);
  }
  for (int k = 0; k < depth; k += kBf16Depth) {
    const uint16_t* a0 = a + k;
    const uint32_t* b0 = b + (k / 2) * ldb;
    FA_TILE_LOAD(4, a0, a_stride);
    FA_TILE_LOAD(6, b0, b_stride);
    FA_TILE_DOT(0, 4, 6);
    if constexpr (NT == 2) {
      const uint32_t* b1 = b0 + 16;
      FA_TILE_LOAD(7, b1, b_stride);
      FA_TILE_DOT(1, 4, 7);
    }
    if constexpr (MT == 2) {
      const uint16_t* a1 = a0 + 16 * lda;
      FA_TILE_LOAD(5, a1, a_stride);
      FA_TILE_DOT(2, 5, 6);
      if constexpr (NT == 2) FA_TILE_DOT(3, 5, 7);
    }
  }
  FA_TILE_STORE(0, c, c_stride);
  if constexpr (NT == 2) FA_TILE_STORE(1, c01, c_stride);
  if constexpr (MT == 2) FA_TILE_STORE(2, c10, c_stride);
  if constexpr (MT == 2 && NT == 2) FA_TILE_STORE(3, c11, c_stride);
}

// rows a multiple of kBf16Rows, cols of 16, depth of kBf16Depth; a Bf16ProductScope must
// be live.
inline void gemm_bf16(int rows, int cols, int depth, const uint16_t* a, int64_t lda,
                      const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int n0 = 0; n0 < cols; n0 += 32) {
    const bool two_cols = n0 + 32 <= cols;
    for (int m0 = 0; m0 < rows; m0 += 32) {
      const bool two_rows = m0 + 32 <= rows;
      const uint16_t* a_block = a + m0 * lda;
      const uint32_t* b_block = b + n0;
      float* c_block = c + m0 * ldc + n0;
      if (two_rows && two_cols) {
        amx_block<2, 2>(depth, a_block, lda, b_block, ldb, c_block, ldc, accumulate);
      } else if (two_rows) {
        amx_block<2, 1>(depth, a_block, lda, b_block, ldb, c_block, ldc, accumulate);
      } else if (two_cols) {
        amx_block<1, 2>(depth, a_block, lda, b_block, ldb, c_block, ldc, accumulate);
      } else {
        amx_block<1, 1>(depth, a_block, lda, b_block, ldb, c_block, ldc, accumulate);
      }
    }
  }
}

#undef FA_TILE_LOAD
#undef FA_TILE_STORE
#undef FA_TILE_ZERO
#undef FA_TILE_DOT
#undef FA_TILE_CONFIGURE
#undef FA_TILE_RELEASE

#else

// Never called in this build (kBf16Products is false): declared so that the kernels'
// bf16 branches compile.
struct Bf16ProductScope {
  explicit Bf16ProductScope(bool) {}
};
inline void gemm_bf16(int, int, int, const uint16_t*, int64_t, const uint32_t*, int64_t, float*,
                      int64_t, bool) {}

#endif

// Runtime form of kBf16Products, for the scratch sizes.
inline bool uses_bf16_products(ElementType type) {
  return type == ElementType::kBF16 && FA_TILED_BF16 != FA_TILED_BF16_NONE;
}

// The tile state a block function of element type Type holds while it runs, when
// `active` (its tiles were made for bf16 products).
struct NoProductScope {
  NoProductScope() {}
};
template <ElementType Type>
auto product_scope(bool active) {
  if constexpr (kBf16Products<Type>) {
    return Bf16ProductScope{active};
  } else {
    return NoProductScope{};
  }
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
