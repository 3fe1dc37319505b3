// Block sizes of each ISA build. A block size changes speed, never results beyond fp32
// rounding: every size works for every problem. They are multiples of the GEMM register
// block (gemm.hpp: kRows rows, kVecs * kLanes columns) so interior blocks need no edge
// kernels.
#pragma once

#include "cpu/tiled/gemm.hpp"

namespace flashattn::cpu::tiled::FA_TILED_ISA {

#if FA_TILED_LANES == 16
constexpr int kBlockQ = 96;
constexpr int kBlockK = 96;
#elif FA_TILED_LANES == 8
constexpr int kBlockQ = 96;
constexpr int kBlockK = 96;
#else
constexpr int kBlockQ = 64;
constexpr int kBlockK = 64;
#endif

// Query blocks per forward task that share each K/V tile: the keys are read from memory
// once per kGroupQ * kBlockQ query rows (4 was faster than 2: bench/RESULTS.md).
constexpr int kGroupQ = 4;

// Key blocks per dK/dV task that share each loaded query block, and query blocks per dQ
// task that share each loaded K/V tile: a load converts, packs and transposes operands and
// recomputes D, as much work as a pair's products or more (bench/RESULTS.md, issue 24).
constexpr int kGroupB = 4;

// Tasks with at most this many query columns prefetch the next K/V tile (decoding).
constexpr int kPrefetchBelowColumns = 32;

// A build with bf16 products uses them for a sequence whose query rows (times the GQA
// group, for the KV cache) exceed this; fewer (decoding) run the fp32 products, where
// packing and padding the bf16 operands costs more than the products save. Decided per
// call and sequence, never per task, so the bits do not depend on the thread count.
constexpr int kBf16ProductsAboveColumns = 32;

static_assert(kBlockQ % (kVecs * kLanes) == 0 && kBlockQ % kRows == 0,
              "query blocks are the columns of K Q^T and the rows of P V");
static_assert(kBlockK % kRows == 0, "key blocks are the rows of K Q^T");

}  // namespace flashattn::cpu::tiled::FA_TILED_ISA
