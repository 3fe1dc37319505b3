// The FlashAttention-2 backward main kernel on mma.sync (sm_80 and newer).
//
// Tile scheduler: one block per (key block, KV head x column slice, batch entry). Each of its
// warps owns 16 keys and keeps their dK and dV rows (the slice's columns) in registers for the
// whole kernel; K and V stay in shared memory. With slices > 1 (large head dims) the blocks of
// one key block each recompute S and dP and take a disjoint share of the dQ pieces. GQA/MQA: the block loops over the query heads of its KV head, so dK and dV
// sum the group in registers and are written once, without atomics or extra workspace.
//
// Mainloop over the query blocks that see this key block: the set is defined by the forward's
// mask policy (FwdMask::blocks with the backward's tile), so a query block is visited iff the
// forward would visit this key block for it, and it is masked iff the forward masks it. Per
// query block (Q and dO double-buffered with cp.async, prefetched one block ahead):
//   dP^T = V dO^T,  S^T = K Q^T                (this warp's 16 keys x block_m queries)
//   P^T  = exp2(S^T * log2_unit - lse2)        (softcap / ALiBi / mask as the forward;
//                                               lse2 and D staged in shared memory)
//   dS^T = P^T o (Z o dP^T - D) [o (1 - tanh^2)]  (softcap: the tanh derivative)
//   dV  += (Z o P^T) dO,  dK += dS^T Q         (P^T and dS^T straight from the registers)
//   dQ  += dS K                                (dS^T through shared memory; fp32 atomics
//                                               into the workspace accumulator)
// Z is dropout's factor (0 or 1/(1-p), the forward's keep-test: dropout.cuh) in the kDropout
// instantiation, 1 in the other, which carries no dropout code.
// The scale is applied once: to dK here, to dQ by bwd_convert_dq.
//
// Deterministic mode: before adding into dQ of query block m, the block waits for its turn
// (the key blocks visiting m, in increasing order; one counter per column slice), so every
// accumulator element receives its additions in one fixed order. Blocks are dispatched in
// increasing blockIdx order, and a block only waits for lower key blocks of the same
// (head, slice, batch), which are already resident or done.
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "core/mask.hpp"
#include "core/params.hpp"
#include "cuda/backward_tuning.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/prim/cp_async.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/sm80/bwd_gemm.cuh"
#include "cuda/sm80/dropout.cuh"
#include "cuda/sm80/fwd_gemm.cuh"
#include "cuda/sm80/fwd_kernel.cuh"
#include "cuda/sm80/fwd_mask.cuh"
#include "cuda/sm80/smem_tile.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace flashattn::cuda::sm80 {

template <int D, class TileT>
struct BwdShape {
  static constexpr BwdTile kTile = TileT::value;
  static_assert(bwd_tile_valid(D, kTile), "invalid backward tile");
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocks = kTile.min_blocks_per_sm;
  static constexpr int kSlices = kTile.slices;
  static constexpr int kDV = D / kSlices;  // dK/dV columns of one block
  static constexpr int kNT = kBlockM / 8;  // 8-query column tiles of S^T
  static constexpr int kDT = kDV / 8;      // 8-column tiles of dK, dV
  using QTile = SmemTile<kBlockM, D>;      // Q and dO
  using SliceTile = SmemTile<kBlockM, kDV>;  // a column slice of Q or dO (whole 64-col panels)
  using KTile = SmemTile<kBlockN, D>;      // K and V
  using DsTile = SmemTile<kBlockN, kBlockM>;
  // Per query block, double-buffered: lse in log2 units and D of its rows (fp32).
  static constexpr int kStatsBytes = 2 * 2 * kBlockM * 4;
  static_assert(kThreads >= 2 * kBlockM, "one thread stages each lse and D value");
  static constexpr int kSmemBytes =
      4 * QTile::kBytes + 2 * KTile::kBytes + DsTile::kBytes + kStatsBytes;
  static_assert(kSmemBytes == bwd_smem_bytes(D, kTile), "smem size disagrees with the table");
  static constexpr int kDqPieces = (kBlockM / 16) * (D / 32);  // 16 x 32 pieces of dQ
  static_assert((D / 32) % kSlices == 0, "dQ pieces split evenly over the slices");
  static constexpr int kSliceDqPieces = kDqPieces / kSlices;
};

__device__ __forceinline__ int load_acquire(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

template <class T, int D, class TileT, bool kDropout>
__global__ void __launch_bounds__(BwdShape<D, TileT>::kThreads, BwdShape<D, TileT>::kMinBlocks)
    bwd_kernel(const __grid_constant__ core::BackwardParams p, const FwdScores sc,
               const BwdWorkspace w) {
  using S = BwdShape<D, TileT>;
  using QTile = typename S::QTile;
  using KTile = typename S::KTile;
  using DsTile = typename S::DsTile;
  constexpr int kBlockM = S::kBlockM, kBlockN = S::kBlockN, kNT = S::kNT, kDT = S::kDT;
  extern __shared__ __align__(128) unsigned char smem[];

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int n = blockIdx.x;
  const int hk = blockIdx.y / S::kSlices;
  const int slice = blockIdx.y % S::kSlices;
  const int b = blockIdx.z;

  // This sequence: its query rows, all its key rows (dK/dV are written for each of them,
  // zero past seqused_k) and the keys it attends.
  const bool varlen = p.cu_seqlens_q != nullptr;
  int seqlen_q = p.seqlen_q, key_rows = p.seqlen_k;
  int64_t q_start = 0, k_start = 0;
  if (varlen) {
    q_start = p.cu_seqlens_q[b];
    k_start = p.cu_seqlens_k[b];
    seqlen_q = p.cu_seqlens_q[b + 1] - static_cast<int>(q_start);
    key_rows = p.cu_seqlens_k[b + 1] - static_cast<int>(k_start);
  }
  const int seqlen_k = p.seqused_k != nullptr ? p.seqused_k[b] : key_rows;
  const int n0 = n * kBlockN;
  if (n0 >= key_rows) return;
  const int64_t q_row0 = varlen ? q_start : static_cast<int64_t>(b) * p.seqlen_q;  // packed row
  const int group = p.nheads / p.nheads_k;

  auto base = [&](const core::Operand& op, int head, int64_t start) {
    return static_cast<const T*>(op.ptr) + (varlen ? start * op.row_stride : b * op.batch_stride) +
           head * op.head_stride;
  };

  const FwdMask mask{seqlen_q, seqlen_k, p.window_left, p.window_right};
  const int m_blocks = (seqlen_q + kBlockM - 1) / kBlockM;
  auto blocks_of = [&](int m) {
    return mask.blocks(m * kBlockM, min(kBlockM, seqlen_q - m * kBlockM), kBlockN);
  };
  auto visited = [&](int m) {
    const KeyBlocks kb = blocks_of(m);
    return n >= kb.begin && n < kb.end;
  };
  auto first_visited = [&](int m) {
    while (m < m_blocks && !visited(m)) ++m;
    return m;
  };

  const uint32_t q_smem = prim::smem_addr(smem);
  const uint32_t do_smem = q_smem + 2 * QTile::kBytes;
  const uint32_t k_smem = do_smem + 2 * QTile::kBytes;
  const uint32_t v_smem = k_smem + KTile::kBytes;
  const uint32_t ds_smem = v_smem + KTile::kBytes;
  unsigned char* ds_bytes = smem + (ds_smem - q_smem);
  float* stats = reinterpret_cast<float*>(ds_bytes + DsTile::kBytes);  // [buffer][lse2 | D]

  auto load_q_do = [&](int g, int m, int buffer) {
    const int h = hk * group + g;
    const int m0 = m * kBlockM;
    block::copy_tile_async<kBlockM, D, S::kThreads>(
        q_smem + buffer * QTile::kBytes, base(p.q, h, q_start) + m0 * p.q.row_stride,
        p.q.row_stride, seqlen_q - m0, tid);
    block::copy_tile_async<kBlockM, D, S::kThreads>(
        do_smem + buffer * QTile::kBytes, base(p.dout, h, q_start) + m0 * p.dout.row_stride,
        p.dout.row_stride, seqlen_q - m0, tid);
  };

  // The value thread `tid` stages for query block m of group head g: lse2 (tid < block_m) or
  // D of one row; rows past the end get lse2 = +inf, D = 0, so their P and dS are 0.
  auto load_stats = [&](int g, int m) {
    const int query = m * kBlockM + tid % kBlockM;
    const bool is_lse = tid < kBlockM;
    if (tid >= 2 * kBlockM || query >= seqlen_q) return is_lse ? CUDART_INF_F : 0.f;
    const int64_t row = (hk * group + g) * static_cast<int64_t>(p.total_q) + q_row0 + query;
    return is_lse ? w.lse_log2[row] : w.dsum[row];
  };

  const warp::LaneOffsets<KTile, QTile> lanes(lane);
  const warp::LaneOffsets<KTile, typename S::SliceTile> slice_lanes(lane);
  // The slice's columns of a Q or dO buffer start at panel slice * kDV / 64.
  const uint32_t slice_bytes = slice * S::kDV * kBlockM * 2;
  const warp::DqLaneOffsets<DsTile, KTile> dq_lanes(lane);
  const uint32_t k_warp_smem = k_smem + KTile::fixed_offset(16 * warp, 0) * 2;
  const uint32_t v_warp_smem = v_smem + KTile::fixed_offset(16 * warp, 0) * 2;
  const int thread_key0 = n0 + 16 * warp + lane / 4;  // + 8 half
  const int m_blocks_max = (p.seqlen_q + kBlockM - 1) / kBlockM;

  float dk[1][kDT][4], dv[1][kDT][4];
#pragma unroll
  for (int d = 0; d < kDT; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[0][d][e] = dv[0][d][e] = 0.f;
  }

  // One query block m of query head h, its Q and dO in `buffer`.
  auto step = [&](auto masked, int h, int m, int buffer, int turn) {
    const int m0 = m * kBlockM;
    const uint32_t q_buf = q_smem + buffer * QTile::kBytes;
    const uint32_t do_buf = do_smem + buffer * QTile::kBytes;
    const float alibi_raw =
        p.alibi_slopes == nullptr ? 0.f : p.alibi_slopes[b * p.alibi_batch_stride + h] / sc.unit;

    const float* lse2 = stats + buffer * 2 * kBlockM;
    const float* dsum = lse2 + kBlockM;
    float s[1][kNT][4], dp[1][kNT][4];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][j][e] = dp[0][j][e] = 0.f;
    }
    warp::qk_scores<T, 1, kNT, D, KTile, QTile>(dp, v_warp_smem, do_buf, lanes);
    warp::qk_scores<T, 1, kNT, D, KTile, QTile>(s, k_warp_smem, q_buf, lanes);
    const auto drop = bwd_dropout_mask<kDropout, kNT>(p, b, h, n0 + 16 * warp, m0, lane);

#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = thread_key0 + 8 * half;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int column = 8 * j + 2 * (lane % 4) + e;
          const int query = m0 + column;
          float raw = s[0][j][2 * half + e];
          float dtanh = 1.f;
          if (sc.softcap_pre != 0.f) {
            raw = prim::thread::tanh_exp2(raw * sc.softcap_pre);
            dtanh = 1.f - raw * raw;
          }
          if (alibi_raw != 0.f) {
            raw -= alibi_raw * fabsf(static_cast<float>(query + seqlen_k - seqlen_q - key));
          }
          float prob = prim::thread::exp2_approx(fmaf(raw, sc.log2_unit, -lse2[column]));
          if constexpr (std::decay_t<decltype(masked)>::value) {
            if (!core::key_visible(query, key, seqlen_q, seqlen_k, p.window_left, p.window_right)) {
              prob = 0.f;
            }
          }
          const float dprob = drop.apply(dp[0][j][2 * half + e], j, half, e);
          s[0][j][2 * half + e] = drop.apply(prob, j, half, e);
          dp[0][j][2 * half + e] = prob * (dprob - dsum[column]) * dtanh;
        }
      }
    }

    using SliceTile = typename S::SliceTile;
    warp::pv_output<T, 1, kNT, kDT, KTile, SliceTile>(dv, s, do_buf + slice_bytes, slice_lanes);
    warp::pv_output<T, 1, kNT, kDT, KTile, SliceTile>(dk, dp, q_buf + slice_bytes, slice_lanes);

    // dS^T to shared memory (its previous readers finished before the step's first barrier).
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * warp + lane / 4 + 8 * half;
        const uint32_t packed =
            prim::thread::pack2<T>(dp[0][j][2 * half], dp[0][j][2 * half + 1]);
        const int offset = DsTile::chunk_offset(row, j) + 2 * (lane % 4);
        *reinterpret_cast<uint32_t*>(ds_bytes + offset * 2) = packed;
      }
    }
    int32_t* turn_counter = nullptr;
    if (p.deterministic) {
      turn_counter =
          w.turns + ((static_cast<int64_t>(slice) * p.batch + b) * p.nheads + h) * m_blocks_max + m;
      if (tid == 0) {
        while (load_acquire(turn_counter) != turn) {
        }
      }
    }
    __syncthreads();  // dS^T complete (and, deterministic, our turn to add into dQ)

    float* accum = w.dq_accum + ((q_row0 + m0) * p.nheads + h) * static_cast<int64_t>(D);
    const int64_t accum_row_stride = static_cast<int64_t>(p.nheads) * D;
#pragma unroll
    for (int i = 0; i < (S::kSliceDqPieces + S::kWarps - 1) / S::kWarps; ++i) {
      const int piece = warp + i * S::kWarps;  // this slice's pieces: every kSlices-th column
      if (S::kSliceDqPieces % S::kWarps == 0 || piece < S::kSliceDqPieces) {
        const int row_tile = piece % (kBlockM / 16);
        const int col_piece = (piece / (kBlockM / 16)) * S::kSlices + slice;
        float dq[4][4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) dq[t][e] = 0.f;
        }
        warp::dq_piece<T, kBlockN, DsTile, KTile>(dq, ds_smem, k_smem, row_tile, col_piece,
                                                  dq_lanes);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = 16 * row_tile + lane / 4 + 8 * half;
          if (m0 + row < seqlen_q) {
#pragma unroll
            for (int t = 0; t < 4; ++t) {
              add_pair(accum + row * accum_row_stride + 32 * col_piece + 8 * t + 2 * (lane % 4),
                       dq[t][2 * half], dq[t][2 * half + 1]);
            }
          }
        }
      }
    }
    if (p.deterministic) {
      __threadfence();
      __syncthreads();
      if (tid == 0) atomicAdd(turn_counter, 1);
    }
  };

  // Prologue: K, V and the first query block's Q, dO in one commit group.
  const T* k = base(p.k, hk, k_start) + n0 * p.k.row_stride;
  const T* v = base(p.v, hk, k_start) + n0 * p.v.row_stride;
  block::copy_tile_async<kBlockN, D, S::kThreads>(k_smem, k, p.k.row_stride, seqlen_k - n0, tid);
  block::copy_tile_async<kBlockN, D, S::kThreads>(v_smem, v, p.v.row_stride, seqlen_k - n0, tid);
  const int m_first = first_visited(0);
  if (m_first < m_blocks) {
    load_q_do(0, m_first, 0);
    if (tid < 2 * kBlockM) stats[tid] = load_stats(0, m_first);
  }
  prim::thread::cp_async_commit();

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  int g = 0, m = m_first, iteration = 0;
  while (m < m_blocks) {
    int next_g = g, next_m = first_visited(m + 1);
    if (next_m >= m_blocks) {
      next_g = g + 1;
      next_m = next_g < group ? m_first : m_blocks;
    }
    prim::thread::cp_async_wait<0>();
    __syncthreads();  // this block's Q, dO landed; every warp is done with the other buffer
    if (next_m < m_blocks) load_q_do(next_g, next_m, (iteration + 1) % 2);
    prim::thread::cp_async_commit();
    const float staged = next_m < m_blocks ? load_stats(next_g, next_m) : 0.f;
    const KeyBlocks kb = blocks_of(m);
    const int h = hk * group + g;
    const int turn = n - kb.begin;
    if (n >= kb.unmasked_begin && n < kb.unmasked_end) {
      step(unmasked, h, m, iteration % 2, turn);
    } else {
      step(masked, h, m, iteration % 2, turn);
    }
    // The other buffer's last readers finished before this iteration's first barrier.
    if (tid < 2 * kBlockM) stats[((iteration + 1) % 2) * 2 * kBlockM + tid] = staged;
    g = next_g;
    m = next_m;
    ++iteration;
  }
  prim::thread::cp_async_wait<0>();

  // Epilogue: dK (scaled) and dV rows of this warp's keys, zero for keys nobody attends.
  T* dk_out = const_cast<T*>(base(p.dk, hk, k_start)) + slice * S::kDV;
  T* dv_out = const_cast<T*>(base(p.dv, hk, k_start)) + slice * S::kDV;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = thread_key0 + 8 * half;
    if (key < key_rows) {
#pragma unroll
      for (int d = 0; d < kDT; ++d) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * d + 2 * (lane % 4) + e;
          dk_out[key * p.dk.row_stride + col] = static_cast<T>(dk[0][d][2 * half + e] * p.scale);
          dv_out[key * p.dv.row_stride + col] = static_cast<T>(dv[0][d][2 * half + e]);
        }
      }
    }
  }
}

}  // namespace flashattn::cuda::sm80
