// The Hopper forward's mainloop: one MMA warpgroup's 64 query rows of a tile against the key
// blocks its tile visits, from the last block to the first, leaving O (unnormalized) and the
// softmax state in registers for the epilogue.
//
// Per key block n (FlashAttention-3's schedule):
//   S = Q K[n]^T          wgmma, Q and K from shared memory, fp32 S in registers
//   O += P[n+1] V[n+1]    wgmma with P (the previous block's weights, 16-bit) as the register
//                         A operand and V from shared memory (MN-major)
//   softcap / ALiBi / mask and the online softmax of S[n], while the tensor cores run P V
//   O *= the rescale factor of block n, once P V is complete (where the tuning table makes the
//        rescaling lazy, only when some row of the warp moved its maximum far enough);
//        P[n] = S[n] packed
// so the softmax of one block overlaps the P V product of the one before (inside the
// warpgroup), and the warpgroups take turns issuing their products (named barriers, one per
// warpgroup, passed round), so one warpgroup's softmax also overlaps the others' products.
// The first block only computes S; the last P V follows the loop.
//
// Buffers: K[n] and V[n] occupy the same ring position (ring.cuh); each is released to the
// producer, one arrival per warp, as soon as the wgmma that read it has completed. Q is
// released after the tile's last S.
//
// Masking: blocks the mask runs through (KeyBlocks) run the masked instantiation of the step,
// the others carry no mask code. Scores stay in raw units as in every kernel here
// (score_transform.cuh, online_softmax.cuh).
//
// FP8 (Shape::kFp8): Q, K and V are e4m3 and every product steps 32 along K. The raw scores
// are q8.k8, so the tile's conversions carry q_descale * k_descale of its (batch entry, KV
// head) (`scores`, with_key_descale()). P is rounded to e4m3 from the S registers as they lie, the
// transposed V holding its keys in the matching order (fp8_key_at); the weights are scaled by
// 2^kPLog2Offset first so that they use e4m3's range rather than its subnormals (the epilogue
// takes the factor off the lse; out's normalization cancels it). Where the tuning table says
// (fwd_sm90_exp2_split: FP8 at d = 64), a share of the weights is computed on the FMA pipe
// rather than the MUFU.
//
// Dropout (kDropout; the instantiation without it carries no dropout code): once a block's
// weights are folded into the softmax (so the row sums and lse are those of the undropped
// weights, as in SPEC.md) and packed into P, the keep bits of its elements are drawn
// (common/dropout.cuh's FwdDropoutMask, the mma.sync kernel's: the same Philox keep-test as
// the CPU reference) and the dropped weights zeroed in P. The kept ones are not scaled one by
// one: O is scaled by 1/(1-p) once, at the end of the tile. The draws come after the previous
// block's P V has completed, when its P no longer holds registers (drawn while that product
// runs, they make ptxas spill at d = 128); they overlap the other warpgroups' products, and a
// row tile's draws are all in flight together (kAllInFlight). Packed GQA tiles (rows of
// several heads) are not run with dropout (fwd_launch.cuh).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/block_mask.cuh"
#include "cuda/common/dropout.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/score_transform.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/ring.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"

namespace flashattn::cuda::sm90 {

// Named barriers of the forward (prim/named_barrier.cuh; 0 is __syncthreads').
enum FwdBarrier : int {
  kFwdTurnBarrier = 1,        // + warpgroup: its turn to issue products (3 ids)
  kFwdMmaBarrier = 4,         // every MMA warpgroup
  kFwdWarpgroupBarrier = 5,   // + warpgroup: one MMA warpgroup's threads (3 ids)
};

// A flat wgmma accumulator of N / 2 registers seen as N / 8 mma.sync-shaped 16 x 8 tiles of
// one row tile (wgmma_fragments.cuh): the layout RowSoftmax and transform_scores take.
template <int R>
__device__ __forceinline__ float (&as_row_tiles(float (&d)[R]))[1][R / 4][4] {
  return *reinterpret_cast<float(*)[1][R / 4][4]>(&d);
}

// T: the output's element type, and the inputs' unless Shape::kFp8 (then e4m3).
template <class T, class Shape, bool kDropout = false>
struct FwdMainloop {
  static_assert(!(kDropout && Shape::kPackGqa), "dropout draws for one head per tile");
  static_assert(!(kDropout && Shape::kFp8), "FP8 attention has no dropout (the API refuses it)");
  static constexpr bool kFp8 = Shape::kFp8;
  using In = std::conditional_t<kFp8, __nv_fp8_e4m3, T>;
  static constexpr int kBlockN = Shape::kBlockN;
  static constexpr int kHeadDim = Shape::kHeadDim;
  static constexpr int kHeadDimV = Shape::kHeadDimV;
  static constexpr int kPSteps = kBlockN / Shape::kStepK;  // K steps of P V
  static constexpr int kRescaleSlack = fwd_sm90_rescale_slack(kFp8, kHeadDimV);
  // FP8: the weights reach 2^(offset + slack) = 256 at most, below e4m3's 448.
  static constexpr float kPLog2Offset =
      kFp8 ? 8.f - static_cast<float>(kRescaleSlack > 0 ? kRescaleSlack : 0) : 0.f;
  static constexpr FwdSm90Exp2Split kExp2 = fwd_sm90_exp2_split(kFp8, kHeadDim);
  using Storage = FwdStorage<Shape>;
  using Ring = RingPosition<Shape::kStages>;
  using QRows = WgmmaOperand<typename Shape::QTile, Major::kK>;  // A of S: queries x head dim
  using KRows = WgmmaOperand<typename Shape::KTile, Major::kK>;  // B of S: keys x head dim
  // B of O: k = keys, n = d_v; FP8 reads the transposed V (rows d_v, K-major).
  using VCols = WgmmaOperand<typename Shape::VTile, kFp8 ? Major::kK : Major::kMN>;

  const FwdSm90Params& params;
  Storage& smem;
  const int warpgroup;  // among the MMA warpgroups
  const int lane;
  const int warp_row0;  // this warp's first row among the warpgroup's 64

  float o[kHeadDimV / 2];
  RowSoftmax<1> softmax;
  ScoreScales scores;  // the tile's (FP8: descaled)

  __device__ __forceinline__ FwdMainloop(const FwdSm90Params& params_, Storage& smem_,
                                         int warpgroup_, int thread)
      : params(params_),
        smem(smem_),
        warpgroup(warpgroup_),
        lane(thread % 32),
        warp_row0(thread / 32 * 16) {}

  __device__ __forceinline__ uint32_t addr(const void* p) const { return prim::smem_addr(p); }

  // One arrival per warp: the warp's wgmma that read the buffer has completed.
  __device__ __forceinline__ void release(uint64_t& bar) const {
    if (lane == 0) mbarrier::arrive(addr(&bar));
  }

  // The warpgroups issue their products in turn: wait for ours, then pass it on.
  // A block of one MMA warpgroup has no turns to take (its neighbours on the SM are other blocks).
  static constexpr bool kTurns = Shape::kMmaWarpgroups > 1;
  __device__ __forceinline__ void take_turn() const {
    if constexpr (kTurns) prim::named_sync(kFwdTurnBarrier + warpgroup, 256);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (kTurns) {
      const int next = warpgroup + 1 == Shape::kMmaWarpgroups ? 0 : warpgroup + 1;
      prim::named_arrive(kFwdTurnBarrier + next, 256);
    }
  }
  // Before the first tile: the first warpgroup holds the turn.
  __device__ __forceinline__ void start_turns() const {
    if (kTurns && warpgroup == 0) prim::named_arrive(kFwdTurnBarrier, 256);
  }

  __device__ __forceinline__ void issue_scores(float (&s)[kBlockN / 2], uint64_t q_desc,
                                               int slot) const {
    const uint64_t k_desc = KRows::descriptor(addr(smem.k[slot]));
#pragma unroll
    for (int ks = 0; ks < kHeadDim / Shape::kStepK; ++ks) {
      warpgroup::mma_ss<kBlockN, In, false, false>(s, QRows::advance(q_desc, ks),
                                                   KRows::advance(k_desc, ks), ks > 0);
    }
    warpgroup::commit_group();
  }

  __device__ __forceinline__ void issue_pv(const uint32_t (&p)[kPSteps][4], int slot) {
    const uint64_t v_desc = VCols::descriptor(addr(smem.v[slot]));
#pragma unroll
    for (int ks = 0; ks < kPSteps; ++ks) {
      warpgroup::mma_rs<kHeadDimV, In, !kFp8>(o, p[ks], VCols::advance(v_desc, ks), true);
    }
    warpgroup::commit_group();
  }

  // This thread's first row in the tile (the second is 8 further).
  __device__ __forceinline__ int thread_row() const {
    return 64 * warpgroup + warp_row0 + lane / 4;
  }

  // The ALiBi slopes, in raw units, of this thread's two rows: the tile's head's, or with
  // packed GQA each row's own head's.
  __device__ __forceinline__ void alibi_slopes(const FwdTileWork& w, float (&raw)[2]) const {
    if (params.p.alibi_slopes == nullptr) {
      raw[0] = raw[1] = 0.f;
      return;
    }
    const float* slopes = params.p.alibi_slopes + w.b * params.p.alibi_batch_stride;
    if constexpr (Shape::kPackGqa) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        raw[half] = slopes[w.head_of(thread_row() + 8 * half)] / scores.unit;
      }
    } else {
      raw[0] = raw[1] = slopes[w.h] / scores.unit;
    }
  }

  // S of key block n, softcapped, biased and (Masked) masked, folded into the softmax; the
  // factor the rows of O must be scaled by, and whether O must be scaled at all (false only
  // where the rescaling is lazy and no row of the warp moved its maximum far enough).
  template <class Masked>
  __device__ __forceinline__ bool fold(Masked masked, const FwdTileWork& w,
                                       const VisibilityMask& mask, const float (&alibi_raw)[2],
                                       float (&s)[kBlockN / 2], int n, float (&factor)[1][2]) {
    const int row = thread_row();
    constexpr bool kOneHead = !Shape::kPackGqa;  // both rows' slopes are alibi_raw[0]
    transform_scores(
        masked, as_row_tiles(s), scores,
        alibi_raw[0] != 0.f || (!kOneHead && alibi_raw[1] != 0.f), mask,
        n * kBlockN + 2 * (lane % 4), [&](int, int half) { return w.query_of(row + 8 * half); },
        [&](int, int half) { return alibi_raw[kOneHead ? 0 : half]; });
    return softmax.template fold_block<kExp2.poly_every, kExp2.degree, kRescaleSlack>(
        as_row_tiles(s), scores.log2_unit, factor, kPLog2Offset);
  }

  // Two weights to e4m3 (round to nearest, saturating), a in the low byte.
  static __device__ __forceinline__ uint32_t to_e4m3x2(float a, float b) {
    return static_cast<uint32_t>(
        __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
  }

  // The weights of S as the register A operand of P V: pairs of 16-bit weights in the
  // accumulator's order (wgmma_fragments.cuh), or with FP8 quads of e4m3 weights, register j
  // of step ks from D registers 16ks + 8(j/2) + 2(j%2) + {0, 1, 4, 5} (fp8_key_at).

  // kDropout: the dropped weights of key block n zeroed in P (packed); else nothing. The kept
  // ones keep their value: run() scales O by 1 / (1 - p) at the end of the tile. The whole
  // warp calls it (FwdDropoutMask::draw shuffles).
  __device__ __forceinline__ void drop(const FwdTileWork& w, uint32_t (&p)[kPSteps][4],
                                       int n) const {
    FwdDropout<kDropout, 1, kBlockN / 8, /*kAllInFlight=*/true> keep;
    keep.draw(params.p, w.b, w.h, w.query_of(thread_row()), n * kBlockN, lane);
    keep.zero_dropped_packed(p);
  }

  static __device__ __forceinline__ void pack(const float (&s)[kBlockN / 2],
                                              uint32_t (&p)[kPSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < kPSteps; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        if constexpr (kFp8) {
          const int d = 16 * ks + 8 * (r / 2) + 2 * (r % 2);
          p[ks][r] = to_e4m3x2(s[d], s[d + 1]) | (to_e4m3x2(s[d + 4], s[d + 5]) << 16);
        } else {
          p[ks][r] = prim::thread::pack2<T>(s[8 * ks + 2 * r], s[8 * ks + 2 * r + 1]);
        }
      }
    }
  }

  // The tile's score conversions: the call's, FP8 with the tile's q and k descales.
  __device__ __forceinline__ ScoreScales tile_scores(const FwdTileWork& w) const {
    if constexpr (kFp8) {
      const core::AttentionParams& p = params.p;
      return with_key_descale(params.scores,
                              p.q_descale.at(w.b, w.hk) * p.k_descale.at(w.b, w.hk));
    } else {
      return params.scores;
    }
  }

  // Rows of V at or past the sequence's last key, in the ring buffer at `slot`, set to zero by
  // all MMA warpgroups together (a TMA load does not zero-fill them: FwdSm90Params).
  __device__ __forceinline__ void zero_v_tail(int slot, int valid_rows, int mma_thread) const {
    using VTile = typename Shape::VTile;
    const uint32_t tile = addr(smem.v[slot]);
    constexpr int kChunksPerLine = VTile::kLineBytes / 16;
    const int chunks = (kBlockN - valid_rows) * kChunksPerLine * VTile::kPanels;
    for (int i = mma_thread; i < chunks; i += Shape::kMmaThreads) {
      const int panel = i / ((kBlockN - valid_rows) * kChunksPerLine);
      const int in_panel = i - panel * (kBlockN - valid_rows) * kChunksPerLine;
      const int row = valid_rows + in_panel / kChunksPerLine;
      const uint32_t at = tile + panel * VTile::kPanelBytes + row * VTile::kLineBytes +
                          (in_panel % kChunksPerLine) * 16;
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
    }
    warpgroup::fence_proxy_async_shared();  // visible to the wgmma that reads V
    prim::named_sync(kFwdMmaBarrier, Shape::kMmaThreads);
  }

  // The whole tile: on return O holds the unnormalized output of this warpgroup's rows and
  // `softmax` their statistics; `kv` is past the tile's key blocks.
  __device__ __forceinline__ void run(const FwdTileWork& w, Ring& kv, uint32_t tile_parity,
                                      int mma_thread) {
    const VisibilityMask mask{w.seq.seqlen_q, w.seq.seqlen_k, params.p.window_left,
                              params.p.window_right};
    scores = tile_scores(w);
    float alibi_raw[2];
    alibi_slopes(w, alibi_raw);
    const uint64_t q_desc =
        QRows::descriptor(addr(smem.q) + Shape::QTile::byte_offset(64 * warpgroup, 0));
    auto is_masked = [&](int n) { return n >= w.kb.unmasked_end || n < w.kb.unmasked_begin; };

    softmax.init();
#pragma unroll
    for (int i = 0; i < kHeadDimV / 2; ++i) o[i] = 0.f;
    float s[kBlockN / 2];
    uint32_t p[kPSteps][4];
    float factor[1][2];

    // The first block: S only.
    const int last = w.kb.end - 1;
    mbarrier::wait(addr(&smem.bar.q_full), tile_parity);
    mbarrier::wait(addr(&smem.bar.k_full[kv.slot]), kv.full_parity());
    warpgroup::fence();
    issue_scores(s, q_desc, kv.slot);
    warpgroup::wait_group<0>();
    warpgroup::fence_operands(s);
    release(smem.bar.k_empty[kv.slot]);
    if (is_masked(last)) {
      fold(std::true_type{}, w, mask, alibi_raw, s, last, factor);
    } else {
      fold(std::false_type{}, w, mask, alibi_raw, s, last, factor);
    }
    pack(s, p);
    drop(w, p, last);
    // FP8: the transpose writes those rows as zero (fwd_transpose_v.cuh).
    if constexpr (!kFp8) {
      const int valid_v_rows = w.seq.seqlen_k - last * kBlockN;
      if (params.zero_v_tail && valid_v_rows < kBlockN) {
        mbarrier::wait(addr(&smem.bar.v_full[kv.slot]), kv.full_parity());
        zero_v_tail(kv.slot, valid_v_rows, mma_thread);
      }
    }

    Ring v_at = kv;  // the block whose P V is due
    auto step = [&](auto masked, int n) {
      kv.advance();
      mbarrier::wait(addr(&smem.bar.k_full[kv.slot]), kv.full_parity());
      take_turn();
      warpgroup::fence();
      issue_scores(s, q_desc, kv.slot);
      mbarrier::wait(addr(&smem.bar.v_full[v_at.slot]), v_at.full_parity());
      warpgroup::fence();  // the wait's loop lies between the first fence and these products
      issue_pv(p, v_at.slot);
      pass_turn();
      warpgroup::wait_group<1>();
      warpgroup::fence_operands(s);
      release(smem.bar.k_empty[kv.slot]);
      const bool rescale_o = fold(masked, w, mask, alibi_raw, s, n, factor);
      warpgroup::wait_group<0>();
      warpgroup::fence_operands(o);
      release(smem.bar.v_empty[v_at.slot]);
      if (rescale_o) RowSoftmax<1>::rescale(as_row_tiles(o), factor);
      pack(s, p);
      drop(w, p, n);
      v_at = kv;
    };
    for (int n = last - 1; n >= w.kb.begin; --n) {
      if (is_masked(n)) {
        step(std::true_type{}, n);
      } else {
        step(std::false_type{}, n);
      }
    }
    release(smem.bar.q_empty);  // the tile's last S is complete

    mbarrier::wait(addr(&smem.bar.v_full[v_at.slot]), v_at.full_parity());
    warpgroup::fence();
    issue_pv(p, v_at.slot);
    warpgroup::wait_group<0>();
    warpgroup::fence_operands(o);
    release(smem.bar.v_empty[v_at.slot]);
    kv.advance();
    if constexpr (kDropout) {
#pragma unroll
      for (int i = 0; i < kHeadDimV / 2; ++i) o[i] *= params.p.dropout_rescale;
    }
  }
};

}  // namespace flashattn::cuda::sm90
