// Which (key block, KV head, batch entry) a backward main-kernel block owns (both backward
// kernels), from its index in the grid (key blocks, KV heads, batch entries). Blocks start in
// about the order of their linear index, x fastest.
//   default: the key blocks of one (head, batch) pair consecutive, so the Q and dO they all
//     read stay in L2; the lowest key block first: under a causal mask it visits the most
//     query blocks, so the longest blocks start first and the last wave is short.
//   deterministic: the highest key block first. A block waits for its turn at a query block
//     only on the higher key blocks of its pair, which started before it: resident or done, so
//     the wait cannot deadlock. With a causal or window mask the highest key block is also the
//     first to reach a query block, so the pairs stay consecutive. Without a mask every key
//     block reaches query block 0 first; started back to back they would queue there one dQ
//     addition after the other, so kBwdInterleave pairs are interleaved (key block N-1 of each,
//     then N-2 of each, ...): a few blocks apart, the previous one has mostly moved on. Few
//     pairs at a time keep their Q, dO and dQ accumulator in L2.
//   deterministic in turn groups (`group_blocks` > 0: under a causal mask, where
//     bwd_deterministic_plan.hpp's bwd_turn_group_blocks says): the key blocks fall into
//     groups of group_blocks consecutive ones, and at each query block the lower groups add
//     first, each highest key block first (bwd_grouped_turn). The grid takes group 0 of every
//     pair, then group 1, ..., each highest key block first: a block again waits only on blocks
//     that started before it. Under a causal mask the lowest key blocks visit the most query
//     blocks; highest-first per pair starts each pair's longest blocks last and the grid ends on
//     a tail of them. In groups the longest blocks start first and the last group's are short.
//   deterministic, rotated (where bwd_deterministic_plan.hpp's bwd_sm90_rotates says, the
//     sm90 kernel with the dQ writer): each block takes its tile from a ticket, a counter it
//     increments as it starts (bwd_ticket_block), not from its grid index. A pair's tickets are
//     consecutive, so a block knows that the blocks of the earlier tickets have started, and
//     only the pair of the latest tickets can have blocks that wait for a block yet to start:
//     the blocks of every other pair all run, and finish. The fixed order above makes every
//     block of a pair that starts at query block 0 wait for all the higher ones to add there
//     first, a staircase that costs most where each block has few query blocks to visit. Here
//     key block n of E visits the query blocks from bwd_rotated_start on, wrapping around, so
//     that at any step the blocks of a pair are at different query blocks, and its turn at a
//     query block is its place in the order in which the blocks reach it (bwd_rotated_turn):
//     nobody waits for a block that arrives after it. Whether the device has the SMs for it
//     picks the order, so the bits of a deterministic result may differ between GPUs (or MIG
//     and MPS partitions) of fewer and more SMs, never between runs of one.
#pragma once

#include <cstdint>

#include "core/platform.hpp"

namespace flashattn::cuda {

// Pairs interleaved: 8 cost the deterministic mode least of 2, 4, 8 and 16 (bench/RESULTS.md).
inline constexpr int kBwdInterleave = 8;

struct BwdBlock {
  int n;   // key block
  int hk;  // KV head
  int b;   // batch entry
};

// The block at grid index (x, y, z) of a (key_blocks, heads, batch) grid; `masked`: a causal
// or sliding-window mask (either window bound set).
FA_HOST_DEVICE BwdBlock bwd_block_at(int x, int y, int z, int key_blocks, int heads, int batch,
                                     bool deterministic, bool masked, int group_blocks = 0) {
  if (deterministic && group_blocks > 0 && group_blocks < key_blocks) {
    // Every group but the last holds group_blocks key blocks of each pair.
    const int64_t pairs = static_cast<int64_t>(heads) * batch;
    const int64_t linear =
        x + static_cast<int64_t>(key_blocks) * (y + static_cast<int64_t>(heads) * z);
    const int group = static_cast<int>(linear / (pairs * group_blocks));
    const int64_t in_group = linear - group * pairs * group_blocks;
    const int first = group * group_blocks;
    const int size = key_blocks - first < group_blocks ? key_blocks - first : group_blocks;
    const int64_t pair = in_group / size;
    return {first + size - 1 - static_cast<int>(in_group % size),
            static_cast<int>(pair % heads), static_cast<int>(pair / heads)};
  }
  if (!deterministic || masked) return {deterministic ? key_blocks - 1 - x : x, y, z};
  const int64_t pairs = static_cast<int64_t>(heads) * batch;
  const int64_t linear = x + static_cast<int64_t>(key_blocks) * (y + static_cast<int64_t>(heads) * z);
  const int64_t chunk = linear / (static_cast<int64_t>(key_blocks) * kBwdInterleave);
  const int64_t first_pair = chunk * kBwdInterleave;
  const int in_chunk = static_cast<int>(pairs - first_pair < kBwdInterleave ? pairs - first_pair
                                                                            : kBwdInterleave);
  const int within = static_cast<int>(linear - first_pair * key_blocks);
  const int64_t pair = first_pair + within % in_chunk;
  return {key_blocks - 1 - within / in_chunk, static_cast<int>(pair % heads),
          static_cast<int>(pair / heads)};
}

// The block of ticket t (0 <= t < key_blocks * heads * batch) in the rotated order: the pairs
// one after the other, each highest key block first (so that a block that took the fixed
// order instead would still wait only on blocks of earlier tickets).
FA_HOST_DEVICE BwdBlock bwd_ticket_block(int64_t ticket, int key_blocks, int heads) {
  const int64_t pair = ticket / key_blocks;
  return {key_blocks - 1 - static_cast<int>(ticket - pair * key_blocks),
          static_cast<int>(pair % heads), static_cast<int>(pair / heads)};
}

// Key block n's turn at a query block that key blocks [begin, end) visit (n among them): the
// higher ones add first, or in turn groups of group_blocks (> 0) the lower groups' first and
// then the higher ones of n's group.
FA_HOST_DEVICE int bwd_grouped_turn(int n, int begin, int end, int group_blocks) {
  if (group_blocks <= 0) return end - 1 - n;
  const int first = n / group_blocks * group_blocks;
  const int lower = (end < first ? end : first) - begin;
  const int last = first + group_blocks;
  return (lower > 0 ? lower : 0) + (end < last ? end : last) - (n + 1);
}

// The rotated order of a pair whose E = key_blocks key blocks all visit each of its
// query_blocks >= E query blocks (no mask): key block n starts at query block floor(n M / E),
// so the starts are distinct and evenly spread.
FA_HOST_DEVICE int bwd_rotated_start(int n, int key_blocks, int query_blocks) {
  return static_cast<int>(static_cast<int64_t>(n) * query_blocks / key_blocks);
}

// Key block n's turn at query block m in the rotated order: how many key blocks reach m
// before it, i.e. start in (start(n), m] cyclically. Starts rise with n, so start(n') <= m
// for the first ceil((m + 1) E / M) key blocks n'.
FA_HOST_DEVICE int bwd_rotated_turn(int n, int m, int key_blocks, int query_blocks) {
  const int64_t starting_by_m =
      (static_cast<int64_t>(m + 1) * key_blocks + query_blocks - 1) / query_blocks;
  const int before = static_cast<int>(starting_by_m < key_blocks ? starting_by_m : key_blocks);
  return before - (n + 1) + (m < bwd_rotated_start(n, key_blocks, query_blocks) ? key_blocks : 0);
}

#if defined(__CUDACC__)
__device__ __forceinline__ BwdBlock bwd_block(bool deterministic, bool masked,
                                              int group_blocks = 0) {
  return bwd_block_at(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z,
                      deterministic, masked, group_blocks);
}
#endif

}  // namespace flashattn::cuda
