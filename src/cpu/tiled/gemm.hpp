// The two tile products of FlashAttention (scores = K Q^T and out += P V, and their
// backward relatives) as one small GEMM: C[M x N] (+)= A[M x depth] * B[depth x N], with
// B and C row-major and N a multiple of kLanes (callers pad their tiles).
//
// The micro-kernel keeps a kRows x (kVecs * kLanes) block of C in registers and, per step
// of the depth, loads kVecs vectors of one B row and broadcasts kRows elements of A: the
// register-blocked outer product of BLIS-style kernels. A is read in place, either
// row-major (element (m, k) at a[m * lda + k]) or column-major (a[m + k * lda]), so a
// transposed tile (P^T, dS^T) needs no copy.
#pragma once

#include <type_traits>

#include "cpu/tiled/simd.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

// Register block: accumulators + kVecs B vectors + 1 broadcast fit the register file
// (16 vector registers below AVX-512, 32 with it).
#if FA_TILED_LANES == 16
constexpr int kRows = 8, kVecs = 3;
#elif FA_TILED_LANES == 8
constexpr int kRows = 6, kVecs = 2;
#else
constexpr int kRows = 4, kVecs = 2;
#endif

enum class ALayout { kRowMajor, kColMajor };

template <int Rows, int Vecs, ALayout Layout>
inline void micro_kernel(int depth, const float* a, int64_t lda, const float* b, int64_t ldb,
                         float* c, int64_t ldc, bool accumulate) {
  VecF acc[Rows][Vecs];
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) {
      acc[m][v] = accumulate ? load(c + m * ldc + v * kLanes) : VecF{};
    }
  }
  for (int k = 0; k < depth; ++k) {
    VecF bk[Vecs];
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) bk[v] = load(b + k * ldb + v * kLanes);
#pragma GCC unroll 16
    for (int m = 0; m < Rows; ++m) {
      const VecF am =
          splat(Layout == ALayout::kRowMajor ? a[m * lda + k] : a[m + k * lda]);
#pragma GCC unroll 16
      for (int v = 0; v < Vecs; ++v) acc[m][v] = fma(am, bk[v], acc[m][v]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < Rows; ++m) {
#pragma GCC unroll 16
    for (int v = 0; v < Vecs; ++v) store(c + m * ldc + v * kLanes, acc[m][v]);
  }
}

// Calls block(rows, vecs, m0, v0) for every register block of a rows x (col_vecs *
// kLanes) output: rows and vecs are std::integral_constant, kRows and kVecs inside and the
// largest that fit at the edges, so every block runs a compile-time instance of a
// micro-kernel. Column panels outside, so one panel of B (depth x kVecs vectors) stays in
// L1 while every row block of A streams past it.
template <int Rows, int Vecs, typename Block>
inline void edge_block(int rows, int vecs, int m0, int v0, Block& block) {
  if constexpr (Rows > 0 && Vecs > 0) {
    if (vecs < Vecs) {
      edge_block<Rows, Vecs - 1>(rows, vecs, m0, v0, block);
    } else if (rows < Rows) {
      edge_block<Rows - 1, Vecs>(rows, vecs, m0, v0, block);
    } else {
      block(std::integral_constant<int, Rows>{}, std::integral_constant<int, Vecs>{}, m0, v0);
    }
  }
}

template <typename Block>
inline void for_register_blocks(int rows, int col_vecs, Block&& block) {
  for (int v0 = 0; v0 < col_vecs; v0 += kVecs) {
    const int vecs = std::min(kVecs, col_vecs - v0);
    for (int m0 = 0; m0 < rows; m0 += kRows) {
      edge_block<kRows, kVecs>(std::min(kRows, rows - m0), vecs, m0, v0, block);
    }
  }
}

// C (+)= A * B. `cols` must be a multiple of kLanes. With accumulate = false C is
// overwritten (it need not be initialized).
template <ALayout Layout>
void gemm(int rows, int cols, int depth, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for_register_blocks(rows, cols / kLanes, [&](auto block_rows, auto vecs, int m0, int v0) {
    const float* a_block = Layout == ALayout::kRowMajor ? a + m0 * lda : a + m0;
    micro_kernel<decltype(block_rows)::value, decltype(vecs)::value, Layout>(
        depth, a_block, lda, b + v0 * kLanes, ldb, c + m0 * ldc + v0 * kLanes, ldc,
        accumulate);
  });
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
