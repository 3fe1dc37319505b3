// How the deterministic backward orders its dQ additions on Hopper (sm90/bwd_kernel.cuh),
// decided from the problem alone so that the workspace query (device-independent) and the
// launch agree:
//   rotated (bwd_block_order.cuh): the kernel with the dQ writer, no mask, dense, as many query
//     blocks as key blocks and 2 to kBwdMaxClusterBlocks of them: a pair's key blocks run as one
//     thread-block cluster and start at different query blocks. Taken where the clusters fit.
//   sliced: otherwise, no mask and at most kBwdMaxSlicedKeyBlocks key blocks: the fp32 dQ
//     accumulator has two slices, key block n adds into slice n % 2 and takes turns only with
//     the key blocks of its slice (the fixed order within it), and the conversion adds the
//     slices in order. Every key block of a pair reaches query block 0 at once and waits there
//     for all the higher ones; two slices halve that staircase, which costs most where each
//     block visits few query blocks. More key blocks keep one slice: the staircase matters
//     less, and zeroing and reading the second slice costs more.
//   in turn groups: under a causal mask, on either kernel (bwd_block_order.cuh): the lower
//     groups of key blocks add first at each query block, so that the grid can start the
//     longest key blocks first.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "core/platform.hpp"
#include "cuda/backward_tuning.hpp"

namespace flashattn::cuda {

// The most key blocks of a pair a cluster holds for the rotated order. A cluster of 8 keeps
// 120 of an H200's 132 SMs busy at one block per SM (cudaOccupancyMaxActiveClusters), one of
// 16 only 112; H200, no mask, deterministic cost: d = 64 at 1024 (8 x 8 blocks) +20% fixed,
// +12% rotated; d = 256 at 512 (8 x 8) +33% / +26%; but d = 128 at 1024 (8 key x 16 query
// blocks, the fixed order's staircase half as steep) +15% / +18%, d = 256 at 1024 (16 x 16)
// +27% / +34%.
inline constexpr int kBwdMaxClusterBlocks = 8;

// H200, no mask: d = 256 at 1024 (16 key blocks) +28% -> +17%, at 2048 (32) +12% either way;
// causal, where the visits are staggered already, 1024 went from +10% to +16%.
inline constexpr int kBwdMaxSlicedKeyBlocks = 16;

inline int64_t bwd_blocks(int64_t rows, int block) { return (rows + block - 1) / block; }

// The problem takes the rotated order on Hopper where clusters of its key blocks fit. Only
// with the dQ writer: the rotation's state cost the column split (d = 256, 255 registers) 3-4%
// of its default speed on an H200, measured before the deterministic kernel was compiled
// apart from the default one (not measured since).
inline bool bwd_sm90_rotates(const core::BackwardParams& p, int head_dim) {
  const BwdSm90Tile t = bwd_sm90_tile(head_dim);
  const int64_t key_blocks = bwd_blocks(p.seqlen_k, t.block_n);
  return t.dq_writer && p.deterministic && !p.has_window() && !p.is_varlen() &&
         key_blocks >= 2 && key_blocks <= kBwdMaxClusterBlocks &&
         key_blocks == bwd_blocks(p.seqlen_q, t.block_m);
}

// Key block n's accumulator slice, and its turn there from its turn in the fixed order over
// all key blocks of its query block (the higher ones first): the higher ones of its parity.
FA_HOST_DEVICE int bwd_dq_slice(int n, int slice_bits) { return n & ((1 << slice_bits) - 1); }
FA_HOST_DEVICE int bwd_slice_turn(int fixed_turn, int slice_bits) {
  return fixed_turn >> slice_bits;
}

// The dQ accumulator slices of the problem on Hopper: 1 or 2.
inline int bwd_sm90_dq_slices(const core::BackwardParams& p, int head_dim) {
  const BwdSm90Tile t = bwd_sm90_tile(head_dim);
  if (t.block_m == 0 || !p.deterministic || p.has_window() || bwd_sm90_rotates(p, head_dim)) {
    return 1;
  }
  const int64_t key_blocks = bwd_blocks(p.seqlen_k, t.block_n);
  return key_blocks >= 2 && key_blocks <= kBwdMaxSlicedKeyBlocks ? 2 : 1;
}

// Turn groups under a causal mask: key_blocks / kBwdMinTurnGroupBlocks groups, at most
// kBwdMaxTurnGroups. H200, d = 256, causal, deterministic cost (highest first -> 4 groups ->
// 8 groups): 16384 +16% -> +12% -> +11..+12%, 4096 +12% -> +8% -> +8%; but at 1024 (16 key
// blocks) +9..+10% -> +12..+13% -> +29%, and at 2048 +10..+11% -> +8% -> +14%: a group of few key
// blocks runs apart in time from the pair's other groups, and with many pairs their Q, dO and
// dQ accumulator leave L2 in between. d = 128 at 4096 (32 key blocks) +1..+2% -> -2% (2 groups
// -0..-1%), at 16384 +5..+6% -> +3..+5%.
inline constexpr int kBwdMinTurnGroupBlocks = 16;
inline constexpr int kBwdMaxTurnGroups = 8;

// Key blocks per turn group of the problem (head dim `head_dim`, a compiled one), 0 for none.
// The tile's block_n is the same on both kernels (backward_tuning.hpp).
inline int bwd_turn_group_blocks(const core::BackwardParams& p, int head_dim) {
  if (!p.deterministic || !p.is_causal()) return 0;
  const int64_t key_blocks = bwd_blocks(p.seqlen_k, bwd_sm80_tile(head_dim).block_n);
  int64_t groups = key_blocks / kBwdMinTurnGroupBlocks;
  groups = groups < kBwdMaxTurnGroups ? groups : kBwdMaxTurnGroups;
  return groups > 1 ? static_cast<int>((key_blocks + groups - 1) / groups) : 0;
}

}  // namespace flashattn::cuda
