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
//
//   A from registers with e4m3 elements (m64nNk32), four 32-bit registers of four 8-bit
//   elements each, the lowest column in the lowest byte: register j holds
//        (16w + g + 8 * (j % 2),  16 * (j / 2) + 4t)  and the next three columns.
// Here the D registers of one k32 step do not line up with A: a thread's D holds columns
// {2t, 2t+1, 8+2t, 9+2t} of each 16, A wants {4t .. 4t+3}. The FP8 forward packs them as they
// are and stores V's keys in the matching order instead (fp8_key_at).
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

struct RegisterAFragment8 {
  static constexpr int kRegisters = 4;

  // The lowest-column element of register `reg`; bytes 1..3 hold the next three columns.
  static constexpr FA_HOST_DEVICE FragmentCoord coord(int thread, int reg) {
    return {16 * (thread / 32) + thread % 32 / 4 + 8 * (reg % 2),
            16 * (reg / 2) + 4 * (thread % 4)};
  }
};

// The order of keys in which the FP8 forward feeds P V: A column (k) position `position`
// of a k32 step takes key fp8_key_at(position) of the step's 32, so that byte b of A register j
// is D register 16s + 8(j/2) + 2(j%2) + 4(b/2) + b%2 of S (the accumulator of the same thread),
// and V's transposed tile stores its keys in this order (sm90/fwd_transpose_v.cuh). Inside
// each 16 columns: position 4t + b holds key 8(b/2) + 2t + b%2.
constexpr FA_HOST_DEVICE int fp8_key_at(int position) {
  const int t = position % 16 / 4, b = position % 4;
  return position / 16 * 16 + 8 * (b / 2) + 2 * t + b % 2;
}

}  // namespace flashattn::cuda::sm90
