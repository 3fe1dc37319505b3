// Which element of a wgmma register operand each thread of the warpgroup holds.
// thread = index inside the warpgroup (0..127), w = thread / 32, g = thread % 32 / 4,
// t = thread % 4. Each warp owns rows [16w, 16w + 16) of the 64-row tile, laid out like the
// m16n8k16 mma.sync fragments (prim/mma.cuh) repeated along N:
//   D, N / 2 fp32 registers: register i is element
//        (16w + g + 8 * (i / 2 % 2),  8 * (i / 4) + 2t + i % 2)
//   A from registers (mma_rs), four 32-bit registers of two 16-bit elements each, the lower
//   column in the low half: register j holds
//        (16w + g + 8 * (j % 2),  8 * (j / 2) + 2t)  and the next column.
// So the D registers 8s .. 8s+7 of one row block, packed in pairs, are exactly the A
// registers of k-step s of a next product (S -> P as the A operand of P V, FA3-style).
#pragma once

#include "core/platform.hpp"

namespace flashattn::cuda::sm90 {

struct FragmentCoord {
  int row, col;
};

template <int N>
struct AccumulatorFragment {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma N is a multiple of 8 up to 256");
  static constexpr int kRegisters = N / 2;

  static constexpr FA_HOST_DEVICE FragmentCoord coord(int thread, int reg) {
    return {16 * (thread / 32) + thread % 32 / 4 + 8 * (reg / 2 % 2),
            8 * (reg / 4) + 2 * (thread % 4) + reg % 2};
  }
};

struct RegisterAFragment {
  static constexpr int kRegisters = 4;

  // The lower-column element of register `reg`; the upper half holds column + 1.
  static constexpr FA_HOST_DEVICE FragmentCoord coord(int thread, int reg) {
    return {16 * (thread / 32) + thread % 32 / 4 + 8 * (reg % 2), 8 * (reg / 2) + 2 * (thread % 4)};
  }
};

}  // namespace flashattn::cuda::sm90
