// The dropout keep-test: a pure function of (seed, offset, batch*heads index, row, col),
// computed with Philox4x32-10 (Salmon et al., SC'11), identical on the host and the
// device so the CPU and CUDA backends drop exactly the same elements and the backward
// regenerates the forward's mask without storing it.
//
// Counter = (col / 16, row, b * nheads + h, low 32 bits of offset); key = (low 32 bits of
// seed, high 32 bits of seed + high 32 bits of offset). One draw yields four 32-bit words of
// four bytes, one byte per column of the group of sixteen: column 16c + 8 tile + 2 w + e
// (tile, e in {0, 1}, w < 4) takes byte 2 tile + e of word w (the lowest byte is byte 0). An
// element is kept iff its byte is >= drop_threshold = round(p * 256), saturated at 255.
// Eight bits per element, as FlashAttention-2 draws them, make one Philox call cover sixteen
// elements: the Philox work is the dropout kernels' main cost. p is resolved to 1/256 (the
// drop probability is drop_threshold / 256); survivors are scaled by 1/(1-p).
//
// The byte order follows the mma fragments (prim/mma.cuh): the lane of a quad with t = w holds
// columns 2 w, 2 w + 1, 8 + 2 w, 9 + 2 w of each sixteen, so word w is the whole share of one
// lane, and the kernels pass a lane its keep bits as one nibble (dropout_keep_quads).
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

// One draw's 128 bits give sixteen 8-bit keep-test values, for sixteen consecutive columns.
inline constexpr uint32_t kDropoutColumnsPerDraw = 16;

// The draw that covers columns 16 * (col / 16) .. 16 * (col / 16) + 15 of one row.
FA_HOST_DEVICE PhiloxWords dropout_draws(uint64_t seed, uint64_t offset, uint32_t bh,
                                         uint32_t row, uint32_t col) {
  return philox4x32_10(col / kDropoutColumnsPerDraw, row, bh, static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32) + static_cast<uint32_t>(offset >> 32));
}

// The 8-bit value of column 16 c + i (i < 16) in the draw of group c: byte 2 (i / 8) + i % 2
// of word (i / 2) % 4.
FA_HOST_DEVICE uint32_t dropout_value(const PhiloxWords& draws, uint32_t i) {
  return (draws.w[(i >> 1) & 3] >> (8 * (2 * (i >> 3) + (i & 1)))) & 0xFFu;
}

FA_HOST_DEVICE bool dropout_keep(uint64_t seed, uint64_t offset, uint32_t bh, uint32_t row,
                                 uint32_t col, uint32_t drop_threshold) {
  return dropout_value(dropout_draws(seed, offset, bh, row, col), col % kDropoutColumnsPerDraw) >=
         drop_threshold;
}

// The keep-test of the sixteen columns 16 * (col / 16) + i of `row` from their one Philox draw,
// in quad order (what a kernel calls): bit 4 w + b is byte b of word w, that is column
// 8 (b / 2) + 2 w + b % 2. Nibble w holds the four keep bits of the quad's lane w, in the order
// (tile 0, e 0), (tile 0, e 1), (tile 1, e 0), (tile 1, e 1).
FA_HOST_DEVICE uint32_t dropout_keep_quads(uint64_t seed, uint64_t offset, uint32_t bh,
                                           uint32_t row, uint32_t col, uint32_t drop_threshold) {
  const PhiloxWords draws = dropout_draws(seed, offset, bh, row, col);
  uint32_t bits = 0;
#if defined(__CUDA_ARCH__)
  // A byte's high bit in vavgu4(x, ~t) = (x + ~t + 1) / 2 per byte is x >= t; one multiply
  // gathers the four high bits of a word into bits 28..31 (no two of its products overlap).
  const uint32_t not_threshold4 = ~(drop_threshold * 0x01010101u);
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const uint32_t high = __vavgu4(draws.w[w], not_threshold4) & 0x80808080u;
    bits |= ((high * 0x00204081u) >> 28) << (4 * w);
  }
#else
  for (uint32_t w = 0; w < 4; ++w) {
    for (uint32_t b = 0; b < 4; ++b) {
      const uint32_t value = (draws.w[w] >> (8 * b)) & 0xFFu;
      bits |= static_cast<uint32_t>(value >= drop_threshold) << (4 * w + b);
    }
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
