// How the deterministic backward orders its dQ additions on Hopper (sm90/bwd_kernel.cuh),
// decided from the problem alone so that the workspace query (device-independent) and the
// launch agree, but for whether the device has the SMs for the rotated order:
//   rotated (bwd_block_order.cuh): the kernel with the dQ writer, no mask, dense, 2 to
//     kBwdMaxRotatedKeyBlocks key blocks and at least as many query blocks: the blocks take
//     their tiles from tickets in the order they start, a pair's consecutive, and the key
//     blocks of a pair start at different query blocks. Where the device has too few SMs for
//     it, the fixed order below (one slice).
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

// The most key blocks of a pair in the rotated order: up to 8 the rotation cut the
// deterministic mode's cost against the fixed order in two slices; at 16 it lost, and on the
// column split (d = 256) its rotation state made the kernel spill, so that kernel keeps the
// fixed order (bench/RESULTS.md).
inline constexpr int kBwdMaxRotatedKeyBlocks = 8;

// The most key blocks for two accumulator slices: they cut the cost at 16 key blocks without
// a mask, not at 32, and raised it under a causal mask, whose visits are staggered already
// (bench/RESULTS.md).
inline constexpr int kBwdMaxSlicedKeyBlocks = 16;

// The fewest SMs for the rotated order. A block waits on the later key blocks of its pair,
// which need SMs to start on: a pair's blocks must fit the GPU together, with room to spare
// for the other pairs (the sm90 kernels run one block per SM).
inline constexpr int kBwdMinRotationSms = 2 * kBwdMaxRotatedKeyBlocks;

inline int64_t bwd_blocks(int64_t rows, int block) { return (rows + block - 1) / block; }

// The problem takes the rotated order on a Hopper device with enough SMs.
inline bool bwd_sm90_rotation_fits(const core::BackwardParams& p, int head_dim) {
  const BwdSm90Tile t = bwd_sm90_tile(head_dim);
  if (!t.dq_writer || !p.deterministic || p.has_window() || p.is_varlen()) return false;
  const int64_t key_blocks = bwd_blocks(p.seqlen_k, t.block_n);
  return key_blocks >= 2 && key_blocks <= kBwdMaxRotatedKeyBlocks &&
         key_blocks <= bwd_blocks(p.seqlen_q, t.block_m);
}

// The problem takes the rotated order on a Hopper device of `sms` SMs.
inline bool bwd_sm90_rotates(const core::BackwardParams& p, int head_dim, int sms) {
  return bwd_sm90_rotation_fits(p, head_dim) && sms >= kBwdMinRotationSms;
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
  if (t.block_m == 0 || !p.deterministic || p.has_window() ||
      bwd_sm90_rotation_fits(p, head_dim)) {
    return 1;
  }
  const int64_t key_blocks = bwd_blocks(p.seqlen_k, t.block_n);
  return key_blocks >= 2 && key_blocks <= kBwdMaxSlicedKeyBlocks ? 2 : 1;
}

// Turn groups under a causal mask: key_blocks / kBwdMinTurnGroupBlocks groups, at most
// kBwdMaxTurnGroups. Groups of fewer key blocks cost more than they gain: such a group runs
// apart in time from the pair's other groups, and with many pairs their Q, dO and dQ
// accumulator leave L2 in between (bench/RESULTS.md has the grid).
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
