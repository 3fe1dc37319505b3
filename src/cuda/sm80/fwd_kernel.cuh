// The FlashAttention-2 forward kernel on mma.sync (sm_80 and newer).
//
// Tile scheduler: one block per (query block, head, batch entry), the query blocks of a head
// in reverse order so that the longest causal rows start first. Inside a block each warp owns
// block_m / warps query rows and keeps their output accumulator and softmax state in registers.
//
// Mainloop over the key blocks the mask policy names, from the last to the first: the masked
// blocks on the right (diagonal, end of the keys), the unmasked middle, the masked blocks on
// the left (window start). Masked and unmasked blocks run different instantiations of the
// step, so the unmasked one carries no mask code; a warp skips the compute of a masked block
// that none of its rows can see.
// Per key block: S = Q K^T (mma.sync from swizzled shared memory), softcap / ALiBi / mask,
// online softmax in the exp2 domain, O += P V with P taken straight from the S registers.
// Dropout (the kDropout instantiation; the other carries no dropout code) zeroes the dropped
// weights of P and scales the kept ones by 1/(1-p) after the softmax update, so the row sums
// and lse are those of the undropped P, as in SPEC.md.
// Loads are cp.async: with one stage, V is loaded while S is computed and the next K while
// P V runs (two barriers per block); with n >= 2 stages, K and V of the block n - 1 ahead are
// prefetched into a ring of buffers (one barrier per block).
//
// Keys: the compile-time key source (fwd_keys.cuh). PagedKeys reads K and V through a paged
// cache's block_table; the page entries of key block n are fetched with the loads of an
// earlier block (one stage: with V[n + 1]; two stages: with block n + 1, one iteration
// before n is loaded), so the ring of two entry slots is always filled in time.
//
// Epilogue: O is normalized once, staged through shared memory and written with 16-byte
// stores; lse goes to its own fp32 array when requested.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "core/params.hpp"
#include "core/sequence.hpp"
#include "cuda/forward_tuning.hpp"
#include "cuda/prim/cp_async.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/sm80/fwd_gemm.cuh"
#include "cuda/common/key_source.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/smem_tile.cuh"
#include "cuda/common/tile_copy.cuh"

namespace flashattn::cuda::sm80 {

template <int D, class TileT>
struct FwdShape {
  static constexpr FwdTile kTile = TileT::value;
  static_assert(fwd_tile_valid(D, kTile), "invalid forward tile");
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kStages = kTile.stages;
  static constexpr int kMinBlocks = kTile.min_blocks_per_sm;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMT = kWarpRows / 16;  // row tiles per warp
  static constexpr int kNT = kBlockN / 8;     // 8-key column tiles of S
  static constexpr int kDT = D / 8;           // 8-column tiles of O
  static constexpr int kKVBuffers = kStages == 1 ? 1 : kStages;
  using QTile = SmemTile<kBlockM, D>;
  using KVTile = SmemTile<kBlockN, D>;
  static constexpr int kSmemBytes = QTile::kBytes + 2 * kKVBuffers * KVTile::kBytes;
  static_assert(kSmemBytes == fwd_smem_bytes(D, kTile), "smem size disagrees with the table");
};

template <class T, int D, class TileT, bool kDropout, class Keys>
__global__ void __launch_bounds__(FwdShape<D, TileT>::kThreads, FwdShape<D, TileT>::kMinBlocks)
    fwd_kernel(const __grid_constant__ core::AttentionParams p, const ScoreScales sc,
               const Keys keys) {
  using S = FwdShape<D, TileT>;
  using QTile = typename S::QTile;
  using KVTile = typename S::KVTile;
  constexpr int kMT = S::kMT, kNT = S::kNT, kDT = S::kDT, kBlockN = S::kBlockN;
  static_assert(!Keys::kPaged || S::kStages <= 2, "the page entry ring has two slots");
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int b = blockIdx.z;
  const int h = blockIdx.y;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * S::kBlockM;

  // This sequence's lengths and row offsets.
  const core::SequenceRows seq = core::sequence_rows(p, b);
  const int seqlen_q = seq.seqlen_q, seqlen_k = seq.seqlen_k;
  if (m0 >= seqlen_q) return;
  const int rows = min(S::kBlockM, seqlen_q - m0);
  const int hk = h / (p.nheads / p.nheads_k);

  auto base = [&](const core::Operand& op, int head, int64_t row0) {
    return static_cast<const T*>(op.ptr) + core::element_offset(op, seq.batch, row0, head);
  };
  const T* q = base(p.q, h, seq.q_row0) + m0 * p.q.row_stride;
  const T* k;
  const T* v;
  if constexpr (Keys::kPaged) {
    k = static_cast<const T*>(p.k.ptr) + hk * p.k.head_stride;
    v = static_cast<const T*>(p.v.ptr) + hk * p.v.head_stride;
  } else {
    k = base(p.k, hk, seq.k_row0);
    v = base(p.v, hk, seq.k_row0);
  }

  const VisibilityMask mask{seqlen_q, seqlen_k, p.window_left, p.window_right};
  const KeyBlocks kb = mask.blocks(m0, rows, kBlockN);
  const float alibi_raw = alibi_raw_slope(p, b, h, sc);

  const uint32_t q_smem = prim::smem_addr(smem);
  const uint32_t kv_smem = q_smem + QTile::kBytes;
  auto k_buffer = [&](int i) { return kv_smem + i * KVTile::kBytes; };
  auto v_buffer = [&](int i) { return kv_smem + (S::kKVBuffers + i) * KVTile::kBytes; };
  const uint32_t page_table = q_smem + S::kSmemBytes;
  // Key block n of K or V (`rows` at this KV head) into a shared buffer.
  auto load_keys = [&](uint32_t buffer, const T* rows, const core::Operand& op, int n) {
    if constexpr (Keys::kPaged) {
      block::copy_paged_tile_async<kBlockN, D, S::kThreads>(
          buffer, rows, static_cast<int>(op.batch_stride), static_cast<int>(op.row_stride),
          page_table, n, seqlen_k - n * kBlockN, tid);
    } else {
      block::copy_tile_async<kBlockN, D, S::kThreads>(buffer, rows + n * kBlockN * op.row_stride,
                                                      op.row_stride, seqlen_k - n * kBlockN, tid);
    }
  };
  auto load_k = [&](int n, int buffer) { load_keys(k_buffer(buffer), k, p.k, n); };
  auto load_v = [&](int n, int buffer) { load_keys(v_buffer(buffer), v, p.v, n); };
  // The page entries of key block n (a paged cache only), by cp.async in the next commit group.
  auto fetch_pages = [&](int n) {
    if constexpr (Keys::kPaged) {
      if (n >= kb.begin) {
        keys.template fetch_block<kBlockN>(page_table, blockIdx.z, n, seqlen_k, tid, true);
      }
    }
  };

  const int warp_row0 = warp * S::kWarpRows;
  const warp::LaneOffsets<QTile, KVTile> lanes(lane);
  const uint32_t q_warp_smem = q_smem + QTile::fixed_offset(warp_row0, 0) * 2;
  const int thread_row0 = m0 + warp_row0 + lane / 4;  // + 16 m + 8 half
  float o[kMT][kDT][4];
  prim::thread::zero(o);
  RowSoftmax<kMT> softmax;
  softmax.init();

  // Scores of key block n: S = Q K^T, then softcap, ALiBi and (masked blocks) the mask.
  auto scores = [&](auto masked, auto& s, int n, uint32_t k_smem) {
    prim::thread::zero(s);
    warp::qk_scores<T, kMT, kNT, D, QTile, KVTile>(s, q_warp_smem, k_smem, lanes);
    transform_scores(
        masked, s, sc, alibi_raw != 0.f, mask, n * kBlockN + 2 * (lane % 4),
        [&](int m, int half) { return thread_row0 + 16 * m + 8 * half; },
        [&](int, int) { return alibi_raw; });
  };

  int iteration = 0;
  // The keys this warp's rows may see: a masked block outside them (the causal diagonal
  // above a warp's rows, say) costs the warp only the block's loads and barriers.
  const int warp_last_row = min(m0 + warp_row0 + S::kWarpRows, seqlen_q) - 1;
  const int warp_keys_begin = mask.keys(m0 + warp_row0).begin;
  const int warp_keys_end = warp_last_row < m0 + warp_row0 ? 0 : mask.keys(warp_last_row).end;

  auto step = [&](auto masked, int n) {
    float s[kMT][kNT][4];
    FwdDropout<kDropout, kMT, kNT> drop;
    const bool active = !std::decay_t<decltype(masked)>::value ||
                        (n * kBlockN < warp_keys_end && (n + 1) * kBlockN > warp_keys_begin);
    if constexpr (S::kStages == 1) {
      prim::thread::cp_async_wait<0>();
      __syncthreads();  // K[n] landed; every warp is done with the previous V
      load_v(n, 0);
      fetch_pages(n - 1);
      prim::thread::cp_async_commit();
      if (active) scores(masked, s, n, k_buffer(0));
      prim::thread::cp_async_wait<0>();
      __syncthreads();  // V[n] landed; every warp is done with K[n]
      if (n > kb.begin) {
        load_k(n - 1, 0);
        prim::thread::cp_async_commit();
      }
      if (active) {
        softmax.update(s, o, sc.log2_unit);
        drop.draw(p, b, h, thread_row0, n * kBlockN, lane);
        drop.apply(s);
        warp::pv_output<T, kMT, kNT, kDT, QTile, KVTile>(o, s, v_buffer(0), lanes);
      }
    } else {
      const int buffer = iteration % S::kStages;
      prim::thread::cp_async_wait<S::kStages - 2>();
      __syncthreads();  // block n landed; every warp is done with the buffer refilled next
      const int ahead = n - (S::kStages - 1);
      if (ahead >= kb.begin) {
        const int refill = (iteration + S::kStages - 1) % S::kStages;
        load_k(ahead, refill);
        load_v(ahead, refill);
      }
      fetch_pages(n - S::kStages);
      prim::thread::cp_async_commit();
      if (active) {
        scores(masked, s, n, k_buffer(buffer));
        softmax.update(s, o, sc.log2_unit);
        drop.draw(p, b, h, thread_row0, n * kBlockN, lane);
        drop.apply(s);
        warp::pv_output<T, kMT, kNT, kDT, QTile, KVTile>(o, s, v_buffer(buffer), lanes);
      }
      ++iteration;
    }
  };

  // Prologue: Q and the first key block(s), one commit group per key block. A paged cache
  // first needs the page entries of the blocks the prologue and the first step load.
  block::copy_tile_async<S::kBlockM, D, S::kThreads>(q_smem, q, p.q.row_stride, rows, tid);
  if constexpr (Keys::kPaged) {
    constexpr int kGroups = kBlockN / PagedKeys::kGroupRows;
    static_assert(S::kStages * kGroups <= S::kThreads, "one thread per page entry");
    const int first = kb.end - 1 - tid / kGroups;  // block of this thread's entry
    if (tid < S::kStages * kGroups && first >= kb.begin) {
      keys.template fetch<kBlockN>(page_table, b, first, tid % kGroups, seqlen_k, false);
    }
    __syncthreads();  // the entries are visible to every copying thread
  }
  if constexpr (S::kStages == 1) {
    if (kb.end > kb.begin) load_k(kb.end - 1, 0);
    prim::thread::cp_async_commit();
  } else {
#pragma unroll
    for (int i = 0; i < S::kStages - 1; ++i) {
      if (kb.end - 1 - i >= kb.begin) {
        load_k(kb.end - 1 - i, i);
        load_v(kb.end - 1 - i, i);
      }
      prim::thread::cp_async_commit();
    }
  }

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  for (int n = kb.end - 1; n >= kb.begin; --n) {
    if (n >= kb.unmasked_end || n < kb.unmasked_begin) {
      step(masked, n);
    } else {
      step(unmasked, n);
    }
  }

  // Epilogue.
  prim::thread::cp_async_wait<0>();
  __syncthreads();  // no copy in flight, every warp done with shared memory
  float lse[kMT][2];
  softmax.finish(o, sc.unit, lse);

  // Stage this warp's rows of O in its own rows of the Q tile, then 16-byte stores.
#pragma unroll
  for (int m = 0; m < kMT; ++m) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + 16 * m + lane / 4 + 8 * half;
#pragma unroll
      for (int d = 0; d < kDT; ++d) {
        const uint32_t packed = prim::thread::pack2<T>(o[m][d][2 * half], o[m][d][2 * half + 1]);
        const int offset = QTile::chunk_offset(row, d) + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(smem + offset * 2) = packed;
      }
    }
  }
  __syncwarp();
  T* out = const_cast<T*>(base(p.out, h, seq.q_row0)) + m0 * p.out.row_stride;
  constexpr int kChunksPerRow = QTile::kChunksPerRow;
  constexpr int kWarpChunks = S::kWarpRows * kChunksPerRow;
  static_assert(kWarpChunks % 32 == 0, "output rows must divide evenly among lanes");
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int id = lane + 32 * i;
    const int row = warp_row0 + id / kChunksPerRow;
    const int c = id % kChunksPerRow;
    if (row < rows) {
      const uint4 chunk = *reinterpret_cast<const uint4*>(smem + QTile::chunk_offset(row, c) * 2);
      *reinterpret_cast<uint4*>(out + row * p.out.row_stride + c * 8) = chunk;
    }
  }

  if (p.lse != nullptr && lane % 4 == 0) {
    float* lse_out =
        p.lse + h * p.lse_head_stride + seq.batch * p.lse_batch_stride + seq.q_row0 + m0;
#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp_row0 + 16 * m + lane / 4 + 8 * half;
        if (row < rows) lse_out[row] = lse[m][half];
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80
