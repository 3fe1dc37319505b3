// The dropout keep-test: a pure function of (seed, offset, batch*heads index, row, col),
// computed with Philox4x32-10 (Salmon et al., SC'11), identical on the host and the
// device so the CPU and CUDA backends drop exactly the same elements and the backward
// regenerates the forward's mask without storing it.
//
// Counter = (col / 16, row, b * nheads + h, low 32 bits of offset); key = (low 32 bits of
// seed, high 32 bits of seed + high 32 bits of offset). One draw yields four 32-bit words,
// read as sixteen bytes: column 16c + i takes byte i % 4 of word i / 4 (the lowest byte
// first). An element is kept iff its byte is >= drop_threshold = round(p * 256), saturated
// at 255. Eight bits per element, as FlashAttention-2 draws them, make one Philox call cover
// sixteen elements: the Philox work is the dropout kernels' main cost. p is resolved to
// 1/256 (the drop probability is drop_threshold / 256); survivors are scaled by 1/(1-p).
#pragma once

#include <cstdint>

#include "core/platform.hpp"

namespace flashattn::core {

struct PhiloxWords {
  uint32_t w[4];
};

// One 32 x 32 -> 64-bit product (a single IMAD.WIDE.U32 on the GPU).
FA_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

FA_HOST_DEVICE PhiloxWords philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3,
                                         uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c0, &hi0, &lo0);
    philox_mulhilo(kMul1, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

inline constexpr int kDropoutColumnsPerDraw = 16;

// The draw that covers columns 16 * (col / 16) .. 16 * (col / 16) + 15 of one row.
FA_HOST_DEVICE PhiloxWords dropout_draws(uint64_t seed, uint64_t offset, uint32_t bh,
                                         uint32_t row, uint32_t col) {
  return philox4x32_10(col >> 4, row, bh, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32) + static_cast<uint32_t>(offset >> 32));
}

// The 8-bit value of column 16 c + i (i < 16) in the draw of group c.
FA_HOST_DEVICE uint32_t dropout_value(const PhiloxWords& draws, uint32_t i) {
  return (draws.w[i >> 2] >> (8 * (i & 3))) & 0xFFu;
}

FA_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, uint32_t bh, uint32_t row,
                                 uint32_t col, uint32_t drop_threshold) {
  return dropout_value(dropout_draws(seed, offset, bh, row, col), col & 15) >= drop_threshold;
}

// Bit i (i < 16) set iff dropout keeps column 16 * (col / 16) + i of `row`: the keep-test of
// sixteen neighbouring columns from their one Philox draw (what a kernel calls).
FA_HOST_DEVICE uint32_t dropout_keep_bits(uint64_t seed, uint64_t offset, uint32_t bh,
                                          uint32_t row, uint32_t col, uint32_t drop_threshold) {
  const PhiloxWords draws = dropout_draws(seed, offset, bh, row, col);
  uint32_t bits = 0;
#if defined(__CUDA_ARCH__)
  // The four bytes of a word compared at once (0xFF in each byte that is >= the threshold),
  // then their low bits gathered into four bits by one multiply (no two products overlap).
  const uint32_t threshold4 = drop_threshold * 0x01010101u;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t ge = __vcmpgeu4(draws.w[w], threshold4) & 0x01010101u;
    bits |= ((ge * 0x01020408u) >> 24) << (4 * w);
  }
#else
  for (uint32_t i = 0; i < 16; ++i) {
    bits |= static_cast<uint32_t>(dropout_value(draws, i) >= drop_threshold) << i;
  }
#endif
  return bits;
}

// round(p * 256), saturated at 255; p in [0, 1).
inline uint32_t dropout_threshold(float p) {
  const double scaled = static_cast<double>(p) * 256.0 + 0.5;
  return scaled >= 255.0 ? 0xFFu : static_cast<uint32_t>(scaled);
}

}  // namespace flashattn::core
