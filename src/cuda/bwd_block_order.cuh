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
#pragma once

#include <cstdint>

#include "core/platform.hpp"

namespace flashattn::cuda {

inline constexpr int kBwdInterleave = 4;

struct BwdBlock {
  int n;   // key block
  int hk;  // KV head
  int b;   // batch entry
};

// The block at grid index (x, y, z) of a (key_blocks, heads, batch) grid; `masked`: a causal
// or sliding-window mask (either window bound set).
FA_HOST_DEVICE BwdBlock bwd_block_at(int x, int y, int z, int key_blocks, int heads, int batch,
                                     bool deterministic, bool masked) {
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

#if defined(__CUDACC__)
__device__ __forceinline__ BwdBlock bwd_block(bool deterministic, bool masked) {
  return bwd_block_at(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z,
                      deterministic, masked);
}
#endif

}  // namespace flashattn::cuda
