// The Hopper backward's Q / dO pipeline: each step's Q and dO rows into one of two buffers.
// By TMA where the launcher could map both operands (BwdTmaMaps) and the query block lies
// inside its sequence: one thread arms the buffer's mbarrier and issues the boxes, the copies
// complete on it, and the MMA threads issue nothing. Else by cp.async from every MMA thread,
// rows past the sequence zero-filled: a varlen sequence's partial last block, whose box would
// read the next sequence's rows (a non-finite value there would reach this block's dK and dV
// through a product with zero), and any call whose operands TMA cannot map (16-byte strides).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "core/params.hpp"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/tma_load.cuh"

namespace flashattn::cuda::sm90 {

// The launcher's tensor maps of q and dout ([block_m][64] boxes of (col, row, head, batch),
// tensor_map.hpp); ok = 0 if either could not be encoded.
struct BwdTmaMaps {
  CUtensorMap q, dout;
  int ok;
};

// Query block m's boxes of Q and dO, issued by one thread, which arms the buffer's mbarrier
// `bar` for their bytes (BwdQdoLoads and the staggered schedule's producer).
template <class QTile, class Sequence>
__device__ __forceinline__ void bwd_issue_q_do_tma(const BwdTmaMaps& maps, const Sequence& seq,
                                                   int h, int m, uint32_t q_dst, uint32_t do_dst,
                                                   uint32_t bar) {
  mbarrier::arrive_expect_tx(bar, 2 * QTile::kBytes);
  const int row = seq.tma_row(m), batch = seq.tma_batch();
  tma::load_operand_tile<QTile>(q_dst, &maps.q, row, h, batch, bar, tma::CacheHint::kEvictLast);
  tma::load_operand_tile<QTile>(do_dst, &maps.dout, row, h, batch, bar,
                                tma::CacheHint::kEvictLast);
}

template <class S, class Sequence>
struct BwdQdoLoads {
  using QTile = typename S::QTile;

  const BwdTmaMaps& maps;
  const core::BackwardParams& p;
  const Sequence& seq;
  uint32_t q_smem, do_smem;  // buffer 0 of each; buffer i at + i * QTile::kBytes
  uint32_t full_bars;        // BwdStorage::q_do_full, 8 bytes per buffer
  int tid;
  uint32_t by_tma = 0;  // bit i: the copies in flight into buffer i are TMA's
  uint32_t phases = 0;  // bit i: the parity with which buffer i's mbarrier completes next

  // Query block m of query head h into `buffer`. Every MMA thread calls it (the same choice
  // in each); the caller commits the cp.async group either way.
  __device__ __forceinline__ void issue(int h, int m, int buffer) {
    const uint32_t q_dst = q_smem + buffer * QTile::kBytes;
    const uint32_t do_dst = do_smem + buffer * QTile::kBytes;
    if (maps.ok && seq.block_inside(m)) {
      if (tid == 0) {
        bwd_issue_q_do_tma<QTile>(maps, seq, h, m, q_dst, do_dst, full_bars + 8 * buffer);
      }
      by_tma |= 1u << buffer;
    } else {
      seq.template copy_q_do_async<S::kHeadDim, S::kMmaThreads>(p, h, m, q_dst, do_dst, tid);
    }
  }

  // The wait for `buffer`'s TMA copies, if it has any in flight; the caller waits for its
  // cp.async groups and then publishes the buffer with a barrier.
  __device__ __forceinline__ void wait(int buffer) {
    if ((by_tma >> buffer) & 1u) {
      mbarrier::wait(full_bars + 8 * buffer, (phases >> buffer) & 1u);
      phases ^= 1u << buffer;
      by_tma &= ~(1u << buffer);
    }
  }
};

}  // namespace flashattn::cuda::sm90
