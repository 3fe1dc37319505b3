// The KV-cache attention kernel on mma.sync (sm_80 and newer): flash_attn_with_kvcache after
// the append (kv_prep.cu), over the updated cache.
//
// Grid: (query block x split, KV head, batch entry). A block owns block_m packed query rows
// (kv_rows.cuh: the query heads of one KV head side by side) and one split of the key blocks
// those rows see. Warps form a warps_m x warps_n grid: a warp owns block_m / warps_m rows and
// block_n / warps_n keys of every key block, with its own output accumulator and running
// softmax (fwd_softmax.cuh). Decode uses 1 x 4 (16 rows, 16 keys per warp per block: the tensor
// work per K/V byte stays low enough for memory speed), prefill 4 x 1 (the forward's shape).
//
// Mainloop: a ring of `stages` K/V buffers filled by cp.async stages-1 blocks ahead, one
// barrier per block; each K/V row's address (paged: through block_table) is computed once per
// block by one thread and shared through shared memory (row offsets below). Per block:
// S = Q K^T, then score_transform.cuh (softcap, ALiBi per row: rows are different heads, the
// visibility mask on blocks that need it), online softmax, O += P V (fwd_gemm.cuh).
// On sm_90 every block allows the dependent launch (the split-KV combine) at its start.
//
// An e4m3 cache (C = __nv_fp8_e4m3): the ring holds the cache's bytes, converted on chip.
// With the decode tile a warp reads only its own keys of K and V, and loads their fragments
// from the ring and converts them in registers to fp16, the type of its products whatever q's
// (kv_e4m3_gemm.cuh: Q is rewritten as scaled fp16 fragments once, before the loop, and the
// output tiles hold their columns in another order, undone in the epilogue). The prefill
// tile's warps read every key: the block converts each block into a tile of T
// (kv_convert.cuh), meets at a barrier, and runs the 16-bit products. k's descale joins the
// score scale and v's the output's normalization: one factor per block, whose (batch entry,
// KV head) has one of each.
//
// Epilogue: every warp puts its unnormalized output and row statistics in shared memory
// (reusing the tiles); the block merges the key-warps (weights exp(max_w - max)), normalizes
// and writes out (+ lse), or with split-KV the fp32 partial output and lse of its split for
// the combine kernel (kv_prep.cu).
#pragma once

#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "core/params.hpp"
#include "cuda/kvcache_tuning.hpp"
#include "cuda/prim/cp_async.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/mma.cuh"
#include "cuda/sm80/fwd_gemm.cuh"
#include "cuda/sm80/kv_e4m3_gemm.cuh"
#include "cuda/common/block_mask.cuh"
#include "cuda/common/kv_convert.cuh"
#include "cuda/common/kv_rows.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/common/smem_tile.cuh"

namespace flashattn::cuda::sm80 {

// What one launch adds to the params: the split count and, when it is > 1, where the splits
// leave their partial results ([split][batch][head][query][d] and [split][batch][head][query]).
struct KvRun {
  ScoreScales sc;
  int num_splits;
  float* partial_out;
  float* partial_lse;
};

// CacheBytes: 2 for a cache of q's type, 1 for an e4m3 cache.
template <int D, class TileT, int CacheBytes = 2>
struct KvShape {
  static constexpr KvTile kTile = TileT::value;
  static_assert(kv_tile_valid(D, kTile, CacheBytes), "invalid KV-cache tile");
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarpsM = kTile.warps_m;
  static constexpr int kWarpsN = kTile.warps_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpRows = kBlockM / kWarpsM;
  static constexpr int kWarpKeys = kBlockN / kWarpsN;
  static constexpr int kMT = kWarpRows / 16;
  static constexpr int kNT = kWarpKeys / 8;
  static constexpr int kDT = D / 8;
  static constexpr bool kE4m3 = CacheBytes == 1;
  // e4m3 fragments converted in registers (warps own their keys) or a converted block tile.
  static constexpr bool kE4m3Registers = kE4m3 && kWarpsM == 1;
  static constexpr bool kE4m3Tile = kE4m3 && kWarpsM > 1;
  using QTile = SmemTile<kBlockM, D>;
  using KVTile = SmemTile<kBlockN, D>;  // what the products read
  // A ring slot: the K or V block as copied, 16-bit units of D * CacheBytes bytes per row.
  using RingTile = SmemTile<kBlockN, D * CacheBytes / 2>;
  // Shared memory: Q, the K ring, the V ring, [the converted K and V,] the row offsets.
  static constexpr int kRingOffset = QTile::kBytes;
  static constexpr int kConvertedOffset = kRingOffset + 2 * kStages * RingTile::kBytes;
  static constexpr int kTileBytes = kConvertedOffset + (kE4m3Tile ? 2 * KVTile::kBytes : 0);
  static constexpr int kSmemBytes = kTileBytes + kv_row_offset_bytes(kTile);
  static_assert(kSmemBytes == kv_smem_bytes(D, kTile, CacheBytes),
                "smem size disagrees with the table");
  static_assert(kBlockN <= kThreads, "one thread per key row computes the row offsets");
};

// C: the cache's element type, T or __nv_fp8_e4m3.
template <class T, int D, class TileT, class C>
__global__ void __launch_bounds__(KvShape<D, TileT, sizeof(C)>::kThreads)
    kv_kernel(const __grid_constant__ core::KVCacheParams p, const KvRun run) {
  using S = KvShape<D, TileT, sizeof(C)>;
  using QTile = typename S::QTile;
  using KVTile = typename S::KVTile;
  constexpr int kMT = S::kMT, kNT = S::kNT, kDT = S::kDT, kBlockN = S::kBlockN,
                kBlockM = S::kBlockM;
  extern __shared__ __align__(128) unsigned char smem[];

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The split-KV combine may be launched now (kvcache_prep.hpp: it waits for this grid's end).
  asm volatile("griddepcontrol.launch_dependents;\n");
#endif
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int split = blockIdx.x % run.num_splits;
  const int m0 = (blockIdx.x / run.num_splits) * kBlockM;
  const KvRows rows(p, blockIdx.z, blockIdx.y);
  const int packed_rows = rows.packed_rows();
  if (m0 >= packed_rows) return;
  const int block_rows = min(kBlockM, packed_rows - m0);

  // The key blocks of this split: the blocks the tile's queries see, cut into equal runs.
  const VisibilityMask mask{rows.seqlen_q, rows.seqlen_k, p.window_left, p.window_right};
  const int first_query = rows.query(m0);
  const int last_query = rows.query(m0 + block_rows - 1);
  const KeyBlocks kb = mask.blocks(first_query, last_query - first_query + 1, kBlockN);
  const int per_split = (kb.end - kb.begin + run.num_splits - 1) / run.num_splits;
  const int n_begin = min(kb.begin + split * per_split, kb.end);
  const int n_end = min(n_begin + per_split, kb.end);

  const uint32_t q_smem = prim::smem_addr(smem);
  const uint32_t ring_smem = q_smem + S::kRingOffset;
  using RingTile = typename S::RingTile;
  auto k_ring = [&](int i) { return ring_smem + i * RingTile::kBytes; };
  auto v_ring = [&](int i) { return ring_smem + (S::kStages + i) * RingTile::kBytes; };
  // The tiles the products read: the ring slot itself, or the one converted block.
  const uint32_t converted_smem = q_smem + S::kConvertedOffset;
  auto k_buffer = [&](int i) { return S::kE4m3Tile ? converted_smem : k_ring(i); };
  auto v_buffer = [&](int i) {
    return S::kE4m3Tile ? converted_smem + KVTile::kBytes : v_ring(i);
  };
  const int chunks_valid = p.head_dim / 8;                  // of q's rows
  const int cache_chunks_valid = p.head_dim * sizeof(C) / 16;  // of the cache's rows

  // Row offsets: the element offset of each K and V row of a key block (paged: through
  // block_table) is computed once, by thread r for row r, and kept in shared memory for the 8
  // threads that copy the row's chunks: int64 [2 slots][K, V][kBlockN] after the tiles.
  // Block x's offsets go to slot x % 2 in the iteration before its copy: the page index is
  // loaded before that iteration's compute, which hides the load, and the offsets are stored
  // after it; the barrier at the top of the next iteration publishes them. The slot was last
  // read by the copy of block x - 2, before that iteration's barrier.
  const bool paged = p.block_table != nullptr;
  int64_t* const row_offsets = reinterpret_cast<int64_t*>(smem + S::kTileBytes);
  auto row_page = [&](int n) {
    const int key = n * kBlockN + tid;
    return paged && tid < kBlockN && key < rows.seqlen_k ? __ldg(rows.page_entry(p, key)) : 0;
  };
  auto store_row_offsets = [&](int n, int page) {
    if (tid < kBlockN) {
      const int key = n * kBlockN + tid;
      int64_t* slot = row_offsets + (n & 1) * 2 * kBlockN;
      slot[tid] = paged ? rows.paged_offset(p, p.k, key, page) : rows.key_offset(p.k, key);
      slot[kBlockN + tid] =
          paged ? rows.paged_offset(p, p.v, key, page) : rows.key_offset(p.v, key);
    }
  };
  const C* const kv_base[2] = {static_cast<const C*>(p.k.ptr), static_cast<const C*>(p.v.ptr)};
  auto load_kv = [&](int n, int buffer) {
    const int key0 = n * kBlockN;
    const uint32_t dst[2] = {k_ring(buffer), v_ring(buffer)};
    const int64_t* slot = row_offsets + (n & 1) * 2 * kBlockN;
    block::copy_rows_async<kBlockN, D * sizeof(C) / 2, S::kThreads, 2>(
        dst, kv_base,
        [&](int, int r, bool valid, int64_t(&offset)[2]) {
          offset[0] = valid ? slot[r] : 0;
          offset[1] = valid ? slot[kBlockN + r] : 0;
        },
        rows.seqlen_k - key0, cache_chunks_valid, tid);
  };

  const int warp_m = warp / S::kWarpsN;
  const int warp_n = warp % S::kWarpsN;
  const int warp_row0 = warp_m * S::kWarpRows;
  const int warp_key0 = warp_n * S::kWarpKeys;
  const warp::LaneOffsets<QTile, KVTile> lanes(lane);
  const uint32_t q_warp_smem = q_smem + QTile::fixed_offset(warp_row0, 0) * 2;
  const uint32_t kv_warp_offset = KVTile::fixed_offset(warp_key0, 0) * 2;
  const uint32_t ring_warp_offset = RingTile::fixed_offset(warp_key0, 0) * 2;
  const warp::E4m3LaneOffsets<RingTile> e4m3_lanes(lane);
  // The decode tile over an e4m3 cache: the factor that scales each of this thread's score
  // rows back (e4m3_q_fragments), per row tile and half.
  __shared__ float q_row_factors[S::kE4m3Registers ? kBlockM : 1];
  float q_row_factor[kMT][2];

  // The prefill tile over an e4m3 cache: ring slot `buffer` into the converted K and V.
  auto convert_kv = [&](int buffer) {
    using Block = E4m3Block<T, kBlockN, D>;
    Block::template convert<kBlockN, S::kThreads>(k_ring(buffer), k_buffer(0), 0, tid);
    Block::template convert<kBlockN, S::kThreads>(v_ring(buffer), v_buffer(0), 0, tid);
    __syncthreads();
  };
  // The score conversions and the output factor of this block's (batch entry, KV head).
  const ScoreScales sc =
      S::kE4m3 ? with_key_descale(run.sc, p.k_descale.at(rows.b, rows.hk)) : run.sc;
  const float out_factor = S::kE4m3 ? p.v_descale.at(rows.b, rows.hk) : 1.f;

  // The fragment rows of this thread (half 0 and 1 of each row tile): packed rows, each its
  // own head. Their query and ALiBi slope are derived where a masked block or ALiBi needs
  // them rather than kept in registers through the loop (the prefill tile has none to spare).
  const int thread_row0 = m0 + warp_row0 + lane / 4;
  auto fragment_row = [&](int m, int half) {
    return min(thread_row0 + 16 * m + 8 * half, packed_rows - 1);
  };
  auto row_query = [&](int m, int half) { return rows.query(fragment_row(m, half)); };
  auto row_slope = [&](int m, int half) {
    return p.alibi_slopes[rows.b * p.alibi_batch_stride + rows.head(fragment_row(m, half))] /
           sc.unit;
  };

  float o[kMT][kDT][4];
  prim::thread::zero(o);
  RowSoftmax<kMT> softmax;
  softmax.init();

  auto step = [&](auto masked, int n, int buffer) {
    float s[kMT][kNT][4];
    prim::thread::zero(s);
    if constexpr (S::kE4m3Registers) {
      warp::qk_scores_e4m3<kMT, kNT, D, RingTile>(s, q_smem, k_ring(buffer) + ring_warp_offset,
                                                  e4m3_lanes, lane);
      if constexpr (!std::is_same_v<T, __half>) {
#pragma unroll
        for (int m = 0; m < kMT; ++m) {
#pragma unroll
          for (int j = 0; j < kNT; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[m][j][e] *= q_row_factor[m][e / 2];
          }
        }
      }
    } else {
      warp::qk_scores<T, kMT, kNT, D, QTile, KVTile>(s, q_warp_smem,
                                                     k_buffer(buffer) + kv_warp_offset, lanes);
    }
    transform_scores(
        masked, s, sc, p.alibi_slopes != nullptr, mask,
        n * kBlockN + warp_key0 + 2 * (lane % 4),
        row_query, row_slope);
    if constexpr (S::kE4m3Registers) {
      // O is rescaled only when a row of the warp raised its maximum (fold_block's slack 0):
      // in a long decode that is seldom, and the rescale is as many multiplies as O has
      // registers, which the e4m3 decode (bound by its instructions, not memory) feels.
      float factor[kMT][2];
      if (softmax.template fold_block<0, 3, 0>(s, sc.log2_unit, factor)) {
        softmax.rescale(o, factor);
      }
      warp::pv_output_e4m3<kMT, kNT, kDT, RingTile>(o, s, v_ring(buffer) + ring_warp_offset,
                                                    e4m3_lanes);
    } else {
      softmax.update(s, o, sc.log2_unit);
      warp::pv_output<T, kMT, kNT, kDT, QTile, KVTile>(o, s, v_buffer(buffer) + kv_warp_offset,
                                                       lanes);
    }
  };

  // Prologue: Q, then the first stages-1 key blocks, one commit group each.
  {
    const uint32_t dst[1] = {q_smem};
    const T* const q_base[1] = {static_cast<const T*>(p.q.ptr)};
    block::copy_rows_async<kBlockM, D, S::kThreads, 1>(
        dst, q_base,
        [&](int, int r, bool valid, int64_t(&offset)[1]) {
          offset[0] = valid ? rows.query_offset(p.q, m0 + r) : 0;
        },
        block_rows, chunks_valid, tid);
    prim::thread::cp_async_commit();
  }
  const int blocks = n_end - n_begin;
#pragma unroll
  for (int i = 0; i < S::kStages - 1; ++i) {
    if (i < blocks) {
      store_row_offsets(n_begin + i, row_page(n_begin + i));
      __syncthreads();  // the offsets of block i are visible to the copy
      load_kv(n_begin + i, i);
    }
    prim::thread::cp_async_commit();
  }
  if (S::kStages - 1 < blocks) {
    store_row_offsets(n_begin + S::kStages - 1, row_page(n_begin + S::kStages - 1));
  }
  if constexpr (S::kE4m3Registers) {
    // Q's group landed (the key blocks' may still be in flight): Q into fp16 fragments.
    prim::thread::cp_async_wait<S::kStages - 1>();
    e4m3_q_fragments<T, kBlockM, D, QTile, S::kThreads>(q_smem, q_row_factors, tid);
#pragma unroll
    for (int m = 0; m < kMT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        q_row_factor[m][half] = q_row_factors[warp_row0 + 16 * m + 8 * half + lane / 4];
      }
    }
  }

  constexpr std::true_type masked{};
  constexpr std::false_type unmasked{};
  for (int it = 0; it < blocks; ++it) {
    prim::thread::cp_async_wait<S::kStages - 2>();
    __syncthreads();  // block `it` landed; every warp is done with the buffer refilled next
    const int ahead = it + S::kStages - 1;
    if (ahead < blocks) load_kv(n_begin + ahead, ahead % S::kStages);
    prim::thread::cp_async_commit();
    const bool next = ahead + 1 < blocks;
    const int next_page = next ? row_page(n_begin + ahead + 1) : 0;
    const int n = n_begin + it;
    if constexpr (S::kE4m3Tile) convert_kv(it % S::kStages);
    if (n >= kb.unmasked_end || n < kb.unmasked_begin) {
      step(masked, n, it % S::kStages);
    } else {
      step(unmasked, n, it % S::kStages);
    }
    if (next) store_row_offsets(n_begin + ahead + 1, next_page);
  }

  // Epilogue: per key-warp outputs and statistics into shared memory.
  prim::thread::cp_async_wait<0>();
  __syncthreads();  // no copy in flight, every warp done with the tiles
  constexpr int kOStride = D + 1;  // fp32 row stride, odd to spread the banks
  float* o_smem = reinterpret_cast<float*>(smem);                  // [warps_n][block_m][D + 1]
  float* max_smem = o_smem + S::kWarpsN * kBlockM * kOStride;      // [warps_n][block_m]
  float* sum_smem = max_smem + S::kWarpsN * kBlockM;               // [warps_n][block_m]
  static_assert((S::kWarpsN * kBlockM * (kOStride + 2)) * 4 <= S::kSmemBytes,
                "the epilogue does not fit the tiles' shared memory");
#pragma unroll
  for (int m = 0; m < kMT; ++m) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = warp_row0 + 16 * m + 8 * half + lane / 4;
      const int slot = warp_n * kBlockM + row;
      const float total = prim::quad::sum(softmax.sum[m][half]);
      if (lane % 4 == 0) {
        max_smem[slot] = softmax.max[m][half];
        sum_smem[slot] = total;
      }
#pragma unroll
      for (int d = 0; d < kDT; ++d) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int column = S::kE4m3Registers ? warp::output_column(d, e, lane)
                                               : 8 * d + 2 * (lane % 4) + e;
          o_smem[slot * kOStride + column] = o[m][d][2 * half + e];
        }
      }
    }
  }
  __syncthreads();

  // Per row: the merged maximum, the weight of each key-warp (1 / sum folded in) and lse.
  // The weights replace the maxima; the lse goes where the first sum was.
  if (tid < block_rows) {
    float row_max = -CUDART_INF_F;
#pragma unroll
    for (int w = 0; w < S::kWarpsN; ++w) row_max = fmaxf(row_max, max_smem[w * kBlockM + tid]);
    float weights[S::kWarpsN];
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < S::kWarpsN; ++w) {
      const float part_max = max_smem[w * kBlockM + tid];
      weights[w] = part_max == -CUDART_INF_F
                       ? 0.f
                       : prim::thread::exp2_approx((part_max - row_max) * sc.log2_unit);
      total += weights[w] * sum_smem[w * kBlockM + tid];
    }
    const float inverse = total > 0.f ? out_factor / total : 0.f;
#pragma unroll
    for (int w = 0; w < S::kWarpsN; ++w) max_smem[w * kBlockM + tid] = weights[w] * inverse;
    sum_smem[tid] = total > 0.f ? row_max * sc.unit + logf(total) : -CUDART_INF_F;
  }
  __syncthreads();

  // One warp per row: the row's destination is computed once, the lanes take its columns.
  const int cols = p.head_dim;
  for (int row = warp; row < block_rows; row += S::kThreads / 32) {
    const int packed = m0 + row;
    T* out = nullptr;
    float* partial = nullptr;
    if (run.num_splits == 1) {
      out = static_cast<T*>(p.out.ptr) + rows.query_offset(p.out, packed);
    } else {
      const int64_t slot =
          ((static_cast<int64_t>(split) * p.batch + rows.b) * p.nheads + rows.head(packed)) *
              rows.seqlen_q + rows.query(packed);
      partial = run.partial_out + slot * cols;
    }
    for (int c = lane; c < cols; c += 32) {
      float value = 0.f;
#pragma unroll
      for (int w = 0; w < S::kWarpsN; ++w) {
        value += max_smem[w * kBlockM + row] * o_smem[(w * kBlockM + row) * kOStride + c];
      }
      if (out != nullptr) {
        out[c] = static_cast<T>(value);
      } else {
        partial[c] = value;
      }
    }
  }
  if (tid < block_rows) {
    const int packed = m0 + tid;
    const float lse = sum_smem[tid];
    if (run.num_splits == 1) {
      if (p.lse != nullptr) {
        p.lse[rows.b * p.lse_batch_stride + rows.head(packed) * p.lse_head_stride +
              rows.query(packed)] = lse;
      }
    } else {
      const int64_t slot =
          ((static_cast<int64_t>(split) * p.batch + rows.b) * p.nheads + rows.head(packed)) *
              rows.seqlen_q + rows.query(packed);
      run.partial_lse[slot] = lse;
    }
  }
}

}  // namespace flashattn::cuda::sm80
