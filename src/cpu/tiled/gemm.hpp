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

// The micro-kernel for the edge blocks: `rows` <= kRows, `vecs` <= kVecs, resolved to a
// compile-time instance.
template <ALayout Layout, int Vecs, int Rows = kRows>
inline void micro_kernel_rows(int rows, int depth, const float* a, int64_t lda,
                              const float* b, int64_t ldb, float* c, int64_t ldc,
                              bool accumulate) {
  if constexpr (Rows > 0) {
    if (rows == Rows) {
      micro_kernel<Rows, Vecs, Layout>(depth, a, lda, b, ldb, c, ldc, accumulate);
    } else {
      micro_kernel_rows<Layout, Vecs, Rows - 1>(rows, depth, a, lda, b, ldb, c, ldc,
                                                accumulate);
    }
  }
}

template <ALayout Layout, int Vecs = kVecs>
inline void micro_kernel_edge(int rows, int vecs, int depth, const float* a, int64_t lda,
                              const float* b, int64_t ldb, float* c, int64_t ldc,
                              bool accumulate) {
  if constexpr (Vecs > 0) {
    if (vecs == Vecs) {
      micro_kernel_rows<Layout, Vecs>(rows, depth, a, lda, b, ldb, c, ldc, accumulate);
    } else {
      micro_kernel_edge<Layout, Vecs - 1>(rows, vecs, depth, a, lda, b, ldb, c, ldc,
                                          accumulate);
    }
  }
}

// C (+)= A * B. `cols` must be a multiple of kLanes. With accumulate = false C is
// overwritten (it need not be initialized).
template <ALayout Layout>
void gemm(int rows, int cols, int depth, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const int col_vecs = cols / kLanes;
  // Column panels outside, so one panel of B (depth x kVecs vectors) stays in L1 while
  // every row block of A streams past it.
  for (int v0 = 0; v0 < col_vecs; v0 += kVecs) {
    const int vecs = std::min(kVecs, col_vecs - v0);
    const float* b_panel = b + v0 * kLanes;
    for (int m0 = 0; m0 < rows; m0 += kRows) {
      const int block_rows = std::min(kRows, rows - m0);
      const float* a_block = Layout == ALayout::kRowMajor ? a + m0 * lda : a + m0;
      float* c_block = c + m0 * ldc + v0 * kLanes;
      if (block_rows == kRows && vecs == kVecs) {
        micro_kernel<kRows, kVecs, Layout>(depth, a_block, lda, b_panel, ldb, c_block, ldc,
                                           accumulate);
      } else {
        micro_kernel_edge<Layout>(block_rows, vecs, depth, a_block, lda, b_panel, ldb,
                                  c_block, ldc, accumulate);
      }
    }
  }
}

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
