// Which key block a backward main-kernel block owns (both backward kernels; the grid is (key
// blocks, KV heads, batch entries), and blocks start in about the order of their linear index,
// x fastest, so the key blocks of one (head, batch) pair start together and share the Q and dO
// they read in L2).
//   default: the lowest key block first: under a causal mask it visits the most query blocks,
//     so the longest blocks start first and the last wave is short.
//   deterministic: the highest key block first. A block waits for its turn at a query block
//     only on higher key blocks of its pair, which started before it: resident or done, so the
//     wait cannot deadlock.
#pragma once

namespace flashattn::cuda {

__device__ __forceinline__ int bwd_key_block(bool deterministic) {
  return deterministic ? static_cast<int>(gridDim.x - 1 - blockIdx.x)
                       : static_cast<int>(blockIdx.x);
}

}  // namespace flashattn::cuda
