// The compile-time shape of the Hopper backward for head dim D (the tile table's
// bwd_sm90_tile): the warpgroups and their register budgets, the operand tiles, each
// warpgroup's share of the products, and shared memory as a struct (BwdStorage).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/backward_tuning.hpp"
#include "cuda/sm90/swizzle128_tile.cuh"

namespace flashattn::cuda::sm90 {

// Where a step issues the next step's Q / dO copies or row statistics: at its start, right
// after the barrier that frees their buffer; once its first S^T and dP^T are in flight (and the
// previous step's turn is released); or once its dQ (and the key split's last dK) product is
// issued, while the MMA warps would wait for it. Any of them leaves the buffer free: both
// warpgroups finished the step before last when they passed this step's first barrier.
enum class BwdNextLoads { kStepStart, kAfterSdp, kAfterDq };
template <BwdNextLoads kAt>
using BwdNextLoadsAt = std::integral_constant<BwdNextLoads, kAt>;

// Where the step's K / V rows and dS^T columns descriptors come from (BwdShape::kDescriptors).
enum class BwdDescriptors { kKept, kUniform, kPerStep };

// How the MMA warpgroups share a step (BwdShape::kSchedule):
//   kLockStep: both meet at the step's start (Q and dO landed, the other buffer free) and
//     before dQ, each multiplies its half of dQ, and they load the next step's Q, dO and row
//     statistics themselves;
//   kStaggered: a producer warp (bwd_producer.cuh) loads Q, dO and the statistics on full /
//     empty mbarriers, and the warpgroups take turns at dQ: at step i warpgroup i % 2
//     multiplies all of it (one 64 x D product) while the other goes on to the next step's
//     S^T and dP^T, so that one warpgroup's element-wise work runs beside the other's
//     products. dS^T is double-buffered by step, and the warpgroups meet only where the dQ
//     warpgroup waits for the other's half (BwdBarrier's kDsDone): that wait also orders the
//     other's next stores into a buffer after this one's dQ product that read it (its next
//     half follows its dQ).
enum class BwdSchedule { kLockStep, kStaggered };

// kDeterministic: the kernel of the deterministic mode. The turns, the accumulator slices and
// the writer's halves are compiled into it alone: in one kernel with the default mode they
// made the 24-register writer spill more and slowed the default mode (bench/RESULTS.md).
// kDropout: the kernel with dropout (its schedule may differ: kSchedule).
template <int D, bool kDeterministic = false, bool kDropout = false>
struct BwdShape {
  static constexpr int kHeadDim = D;
  static constexpr BwdSm90Tile kTile = bwd_sm90_tile(D);
  static_assert(bwd_sm90_tile_valid(D, kTile), "invalid sm90 backward tile");
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr bool kKeySplit = kBlockN == 128;
  // The dQ writer (bwd_sm90_tile): a third warpgroup takes each step's dQ from a
  // double-buffered fp32 stash and adds it into the accumulator, in turn in the deterministic
  // mode, so that the MMA warpgroups neither issue the atomics nor wait for turns. Without it
  // the MMA warpgroups add dQ themselves.
  static constexpr bool kDqWriter = kTile.dq_writer;
  // The staggered schedule where the table says, for the default mode's kernel with dropout
  // (whose longer element-wise phase it overlaps; without dropout it was slower, and the
  // deterministic mode keeps its turns in the lock step: bench/RESULTS.md).
  static constexpr BwdSchedule kSchedule = !kDeterministic && kDropout && kTile.stagger_dropout
                                               ? BwdSchedule::kStaggered
                                               : BwdSchedule::kLockStep;
  static constexpr bool kStaggered = kSchedule == BwdSchedule::kStaggered;
  static_assert(!kStaggered || (kDqWriter && kBlockM == 64 && kBlockN == 128),
                "the staggered schedule: the key split, one query pass, the writer's warps");
  static constexpr int kMmaThreads = 32 * kTile.warps;
  static constexpr int kThreads = kMmaThreads + (kDqWriter ? 128 : 0);
  // Deterministic with kTile.writer_halves: the writer's two halves of 64 threads take
  // alternate steps, half i always stash buffer i, so that one half's turn release, which waits
  // for its additions to land, overlaps the other half's additions. Each stash handoff joins
  // the MMA warpgroups and the writer (or its half).
  static constexpr int kWriterHalves = kDeterministic && kTile.writer_halves ? 2 : 1;
  // The staggered schedule's producer is the writer warpgroup's first warp; its other three
  // add dQ.
  static constexpr int kProducerThreads = kStaggered ? 32 : 0;
  static constexpr int kAdderThreads = 128 - kProducerThreads;
  static constexpr int kWriterHalfThreads = kAdderThreads / kWriterHalves;
  // The threads that store a step's dQ into the stash: one warpgroup when it takes turns.
  static constexpr int kDqThreads = kStaggered ? 128 : kMmaThreads;
  // Registers per thread after the reallocation (registers.cuh): 2 x 128 x 240 + 128 x 24
  // fits the 64K register file.
  static constexpr int kMmaRegisters = 240;
  static constexpr int kWriterRegisters = 24;
  // Stash rows are padded by 8 floats: a warp's fragment store then covers the 32 banks in the
  // minimum two wavefronts.
  static constexpr int kStashStride = D + 8;
  static constexpr int kStashBytes = kDqWriter ? kBlockM * kStashStride * 4 : 0;
  // Staggered, one stash (a step's dQ is stored a step after the last, which the writer has
  // added by then) leaves the room for dS^T's second buffer.
  static constexpr int kStashBuffers = kStaggered ? 1 : 2;
  // Without the writer each MMA warp adds its own dQ rows, regrouped through a shared-memory
  // scratch of 16 rows x 32 floats so that 8 lanes cover a row's 128-byte line: L2 takes fp32
  // reductions faster in whole lines than in the 32-byte row pieces of the accumulator
  // layout (bench/RESULTS.md).
  static constexpr int kScratchRowBytes = 32 * 4;
  static constexpr int kScratchBytes = kDqWriter ? 0 : 16 * kScratchRowBytes;  // per warp
  // A warpgroup's share of each product (rows x columns; the rows are always 64).
  // S^T and dP^T: the key split takes the block's queries 64 at a time (kSdpParts passes, so
  // that S^T, dP^T, dK and dV fit the registers together even at block_m 128).
  static constexpr int kSdpQueries = kKeySplit ? 64 : kBlockM / 2;
  static constexpr int kSdpParts = kKeySplit ? kBlockM / 64 : 1;
  static constexpr int kKvCols = kKeySplit ? D : D / 2;                   // dK, dV
  // dQ: warpgroup w takes query rows [64w, +64) at block_m 128, else head-dim columns
  // [w D / 2, +D / 2); the staggered schedule's one warpgroup takes it all.
  static constexpr bool kDqSplitsQueries = kBlockM == 128;
  static constexpr bool kDqSplitsCols = !kDqSplitsQueries && !kStaggered;
  static constexpr int kDqCols = kDqSplitsCols ? D / 2 : D;
  using QTile = Swizzle128Tile<kBlockM, D>;         // Q and dO
  using KTile = Swizzle128Tile<kBlockN, D>;         // K and V
  using PTile = Swizzle128Tile<kBlockN, kBlockM>;   // dS^T (and P^T): rows keys, columns queries
  // dS^T, then P^T (column split) or, staggered, dS^T of odd steps.
  static constexpr int kPTiles = kKeySplit && !kStaggered ? 1 : 2;
  // Dropout: the keep bits of a pass drawn while S^T multiplies, before dP^T is issued (d = 64),
  // or once both are in flight (bwd_mainloop.cuh); the faster of the two by head dim
  // (bench/RESULTS.md).
  static constexpr bool kDropoutDrawBeforeDp = D == 64;
  // dP^T's first k-steps issued between S^T's, in S^T's wgmma group (the P^T element-wise step
  // then waits for them too): faster at d = 128 only (bench/RESULTS.md).
  static constexpr int kEarlyDpSteps = D == 128 ? D / 32 : 0;
  // Loop invariants kept out of spilled registers (prim/uniform.cuh), where ptxas had spilled
  // them and reloaded them from L2 on each step's path (bench/RESULTS.md):
  //   kDescriptors: the operand descriptors that depend on the warpgroup, computed at the
  //     block's start from its index (kKept), from a warp-uniform copy of it, which ptxas
  //     keeps in uniform registers (kUniform), or, for the K / V rows and the dS^T columns,
  //     again at each step from a re-read thread index (kPerStep);
  //   kFreshStatsIndex: the row statistics' loads find their row from a re-read thread index.
  // Chosen per head dim by measurement: each made ptxas spill other values at other head dims.
  static constexpr BwdDescriptors kDescriptors = D == 128  ? BwdDescriptors::kUniform
                                                 : D == 64 ? BwdDescriptors::kPerStep
                                                           : BwdDescriptors::kKept;
  static constexpr bool kFreshStatsIndex = D != 256;
  // A warpgroup's first key of S^T / dP^T / dK / dV, and its first dQ row (the kernel's key0
  // and dq_query0), for the step's kPerStep descriptors.
  static __device__ __forceinline__ int key0_of(int group) { return kKeySplit ? 64 * group : 0; }
  static __device__ __forceinline__ int dq_query0_of(int group) {
    return kDqSplitsQueries ? 64 * group : 0;
  }
  // The default mode's: the fastest of the three by head dim (bench/RESULTS.md); the later ones
  // keep the copies' addresses live across products, which at d = 128 spills more. The
  // deterministic mode's: the copies at the start; without the writer the statistics after
  // the turn's release, whose wait covers the loads the warp has in flight (bench/RESULTS.md).
  static constexpr BwdNextLoads kDefaultNextLoads = D == 64    ? BwdNextLoads::kAfterSdp
                                                    : D == 128 ? BwdNextLoads::kStepStart
                                                               : BwdNextLoads::kAfterDq;
  static constexpr BwdNextLoads kNextCopies =
      kDeterministic ? BwdNextLoads::kStepStart : kDefaultNextLoads;
  static constexpr BwdNextLoads kNextStats =
      !kDeterministic ? kDefaultNextLoads
      : kDqWriter     ? BwdNextLoads::kStepStart
                      : BwdNextLoads::kAfterSdp;
};

// The dQ writer's: two stashes and their handoff, an mbarrier per buffer for "full" (every MMA
// thread arrives after its stores, the writer waits) and one for "empty" (the writer's half
// arrives after its loads, the MMA threads wait before the next stores into the buffer).
template <class S, bool kDqWriter = S::kDqWriter>
struct BwdDqStorage {
  alignas(8) uint8_t stash[S::kStashBuffers][S::kStashBytes];
  uint64_t stash_full[S::kStashBuffers], stash_empty[S::kStashBuffers];
};
// Without the writer: each MMA warp's scratch.
template <class S>
struct BwdDqStorage<S, false> {
  alignas(16) uint8_t scratch[S::kTile.warps][S::kScratchBytes];
};

// The stash mbarriers in the shared window, from the address of BwdDqStorage::stash_full
// (stash_empty follows it: asserted where the kernel takes that address).
template <class S>
__device__ __forceinline__ uint32_t bwd_stash_full(uint32_t bars, int buffer) {
  return bars + 8 * buffer;
}
template <class S>
__device__ __forceinline__ uint32_t bwd_stash_empty(uint32_t bars, int buffer) {
  return bars + 8 * S::kStashBuffers + 8 * buffer;
}

// The Q / dO buffers' mbarriers in the shared window, from the address of
// BwdStorage::q_do_full (q_do_empty follows it: asserted where the kernel takes that address).
__device__ __forceinline__ uint32_t bwd_q_do_full(uint32_t bars, int buffer) {
  return bars + 8 * buffer;
}
__device__ __forceinline__ uint32_t bwd_q_do_empty(uint32_t bars, int buffer) {
  return bars + 16 + 8 * buffer;
}

// Shared memory (the dynamic allocation, aligned up to the 1024-byte swizzle atom): Q and dO
// double-buffered, K, V, dS^T (and P^T with the column split), the rows' statistics, the Q / dO
// buffers' mbarriers; then
// either the dQ writer's two stashes and their mbarriers or each warp's dQ scratch. The kernel
// addresses it in the shared window, as the aligned base plus a member's offset.
template <class S>
struct BwdStorage {
  alignas(1024) uint8_t q[2][S::QTile::kBytes];
  uint8_t dout[2][S::QTile::kBytes];
  uint8_t k[S::KTile::kBytes];
  uint8_t v[S::KTile::kBytes];
  uint8_t ds_pt[S::kPTiles][S::PTile::kBytes];  // S::kPTiles says
  float stats[2][2][S::kBlockM];                 // [buffer][lse2 | D][row]
  // Per Q / dO buffer: its copies (and, staggered, its statistics) landed (BwdQdoLoads,
  // BwdProducer); staggered, every MMA thread is done with it (BwdProducer).
  uint64_t q_do_full[2], q_do_empty[2];
  BwdDqStorage<S> dq;
};

// Bytes a block asks for: the storage up to its last member (sizeof would round it up to the
// 1024-byte alignment) and the slack to align it.
template <class S>
constexpr int bwd_storage_bytes() {
  return S::QTile::kAlignment +
         static_cast<int>(offsetof(BwdStorage<S>, dq) + sizeof(BwdDqStorage<S>));
}

// Named barriers (prim/named_barrier.cuh): the MMA warpgroups among themselves, and per writer
// half its threads among themselves. (The stash handoff between them is on mbarriers:
// BwdDqStorage.)
// The staggered schedule's kDsDone (the step's dQ warpgroup waits for the other's dS^T half),
// one per step parity so that the warpgroup a step ahead cannot complete the other's phase.
enum BwdBarrier : int {
  kMmaBarrier = 1,
  kWriterBarrier = 2,  // and 3 (writer halves)
  kDsDoneBarrier = 4,  // and 5
};

}  // namespace flashattn::cuda::sm90
