// Which (key block, KV head, batch entry) a backward main-kernel block owns, from its index in
// the grid (key blocks, KV heads, batch entries). Both backward kernels use it; blocks start in
// about the order of their linear index (x fastest).
//   default: the key blocks of one (head, batch) pair are consecutive, so the Q and dO they
//     all read stay in L2; the lowest key block first: under a causal mask it visits the most
//     query blocks, so the longest blocks start first and the last wave is short.
//   deterministic: the highest key block first, and the key block of every (head, batch) pair
//     before the next key block. A block waits for its turn at a query block only on the
//     higher key blocks of its pair, which started before it (the wait cannot deadlock) and,
//     with many pairs, a wave or more before it: without a mask every key block reaches query
//     block 0 first, and started together they would queue there one dQ addition after the
//     other.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

struct BwdBlock {
  int n;   // key block
  int hk;  // KV head
  int b;   // batch entry
};

__device__ __forceinline__ BwdBlock bwd_block(bool deterministic) {
  if (!deterministic) {
    return {static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y),
            static_cast<int>(blockIdx.z)};
  }
  const int64_t pairs = static_cast<int64_t>(gridDim.y) * gridDim.z;
  const int64_t linear =
      blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  const int rank = static_cast<int>(linear / pairs);
  const int pair = static_cast<int>(linear % pairs);
  return {static_cast<int>(gridDim.x) - 1 - rank, pair % static_cast<int>(gridDim.y),
          pair / static_cast<int>(gridDim.y)};
}

}  // namespace flashattn::cuda
