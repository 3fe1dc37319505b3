// The Hopper forward's producer: one thread (kThreads) that issues every TMA load of the
// block's tiles; the whole warpgroup in the paged instantiation, whose threads look up a key
// block's pages and copy its boxes side by side (below), with thread 0 doing the rest.
//
// Per tile with keys: K of the first key block (the last one in key order: the mainloop walks
// the keys from the end), then Q once the MMA warpgroups are done with the previous tile's Q,
// then K and V of the remaining blocks with V one block behind K, the order in which the
// mainloop consumes them (it multiplies P V of the block before the one whose S = Q K^T it
// just issued). Each K and V buffer of the ring is refilled once every MMA warp has released
// it; where O is staged in the V ring, the tile's first V also waits for the previous tile's
// epilogue to have read O back out, while its first two K blocks are loaded during it.
//
// FP8 (Shape::kFp8): V lands in the raw ring (raw_full / raw_empty), from which the transposing
// warps (fwd_transpose_v.cuh) fill the V ring the MMA warpgroups read.
//
// kPaged: K and V come from a paged KV cache (FwdPageTable), a key block box by box, each box
// from the page block_table names for it, one copy per box and panel. Copy j of a block is
// thread (warp j % 4, lane j / 4)'s: it reads its box's entry and issues that copy, so a block
// waits for one table read rather than one per box in turn, and each warp issues a quarter of
// the copies (a TMA copy takes its coordinates from uniform registers, so a warp issues its
// lanes' copies one after another). The entries of a block are read before the producer waits
// for the ring slot its K goes to, so that the read's latency passes while the slot drains,
// and kept for the V of the same block (loaded one block later). Boxes that start past the
// sequence's last key are not loaded (their table entries may not exist); the mask hides their
// K rows and the mainloop zeroes their V rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/prim/math.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/ring.cuh"
#include "cuda/sm90/tma_load.cuh"

namespace flashattn::cuda::sm90 {

template <class Shape, bool kPaged>
struct FwdProducer {
  using Storage = FwdStorage<Shape>;
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  using VTile = typename Shape::VTile;
  using Ring = RingPosition<Shape::kStages>;

  static constexpr int kThreads = kPaged ? 128 : 1;
  // Paged: a key block's copies, one per box (of 16 keys or more) and panel.
  static constexpr int kMaxCopies = Shape::kBlockN / 16 * Shape::KTile::kPanels;
  static_assert(!kPaged || kMaxCopies <= kThreads, "a thread per copy of a key block");
  static_assert(!kPaged || Shape::KTile::kPanels == Shape::VTile::kPanels,
                "K and V copied alike");
  static_assert(!kPaged || !Shape::kFp8, "no paged FP8 kernel");
  // Where V goes: the ring the MMA warpgroups read, or with FP8 the transpose's raw ring.
  static constexpr bool kVRaw = Shape::kFp8;
  using VLandTile = typename Shape::VRawTile;

  const FwdSm90Params& params;
  Storage& smem;

  __device__ __forceinline__ uint32_t addr(const void* p) const { return prim::smem_addr(p); }
  // The thread that arms the barriers and issues every copy but the paged boxes.
  __device__ __forceinline__ bool leader() const { return !kPaged || threadIdx.x == 0; }
  // This thread's copy of a paged key block (see the header).
  __device__ __forceinline__ static int paged_copy() {
    return 4 * static_cast<int>(threadIdx.x % 32) + static_cast<int>(threadIdx.x / 32);
  }

  // Where this thread's copy of key block n comes from (paged; the dense kernel has none).
  struct PagedBox {
    int boxes = 0;  // boxes of the block that hold a key of the sequence
    int page = 0;   // this thread's box (copy < boxes * panels): page and row in it
    int row = 0;
  };
  struct NoBox {};
  using Box = std::conditional_t<kPaged, PagedBox, NoBox>;

  // Block n's box of this lane, read from block_table (the read is in flight until used).
  __device__ __forceinline__ Box lookup(const FwdTileWork& w, int n) const {
    Box box{};
    if constexpr (kPaged) {
      const FwdPageTable& pages = params.pages;
      const int key0 = n * Shape::kBlockN;
      const int keys = min(Shape::kBlockN, w.seq.seqlen_k - key0);
      const int copy = paged_copy();
      box.boxes = (keys + pages.box_rows - 1) / pages.box_rows;
      if (copy < box.boxes * KTile::kPanels) {
        const int key = key0 + copy / KTile::kPanels * pages.box_rows;
        const int index = key / pages.page_size;
        box.page = __ldg(pages.block_table + w.b * pages.table_batch_stride + index);
        box.row = key - index * pages.page_size;
      }
    }
    return box;
  }

  // Key block `box`'s rows of K or V (`map`) into the ring buffer `tile` at `at`, once it is
  // empty; `n` names the block for the dense load.
  template <class Tile>
  __device__ __forceinline__ void load_keys(uint8_t* tile, uint64_t& full, uint64_t& empty,
                                            const CUtensorMap* map, const FwdTileWork& w, int n,
                                            const Box& box, const Ring& at) const {
    mbarrier::wait(addr(&empty), at.empty_parity());
    if constexpr (kPaged) {
      load_paged_keys<Tile>(addr(tile), addr(&full), map, w, box);
    } else {
      // One thread.
      mbarrier::arrive_expect_tx(addr(&full), Tile::kBytes);
      tma::load_operand_tile<Tile>(addr(tile), map, w.k_row0 + n * Shape::kBlockN, w.hk,
                                   w.batch, addr(&full), tma::CacheHint::kEvictLast);
    }
  }

  // The copies of a key block, one per thread, from the pages `box` names. The leader's
  // arrival announces all their bytes; a copy that lands before it only takes the barrier's
  // transaction count below zero for a while, and the phase cannot complete without that
  // arrival.
  template <class Tile>
  __device__ __forceinline__ void load_paged_keys(uint32_t tile, uint32_t full,
                                                  const CUtensorMap* map, const FwdTileWork& w,
                                                  const PagedBox& box) const {
    const int rows = params.pages.box_rows;
    if (leader()) {
      mbarrier::arrive_expect_tx(full, box.boxes * rows * Tile::kLineBytes * Tile::kPanels);
    }
    const int copy = paged_copy();
    if (copy < box.boxes * Tile::kPanels) {
      const int p = copy % Tile::kPanels;
      const uint32_t dst =
          tile + p * Tile::kPanelBytes + copy / Tile::kPanels * rows * Tile::kLineBytes;
      tma::load_operand_box(dst, map, p * Tile::kPanelCols, box.row, w.hk, box.page, full,
                            tma::CacheHint::kEvictLast);
    }
  }
  __device__ __forceinline__ void load_k(const FwdTileWork& w, int n, const Box& box,
                                         const Ring& at) const {
    load_keys<KTile>(smem.k[at.slot], smem.bar.k_full[at.slot], smem.bar.k_empty[at.slot],
                     &params.k_map, w, n, box, at);
  }
  __device__ __forceinline__ void load_v(const FwdTileWork& w, int n, const Box& box,
                                         const Ring& at) const {
    if constexpr (kVRaw) {
      load_keys<VLandTile>(smem.v_raw[at.slot], smem.bar.raw_full[at.slot],
                           smem.bar.raw_empty[at.slot], &params.v_map, w, n, box, at);
    } else {
      load_keys<VTile>(smem.v[at.slot], smem.bar.v_full[at.slot], smem.bar.v_empty[at.slot],
                       &params.v_map, w, n, box, at);
    }
  }

  // Run by kThreads threads, which take the same path through it.
  __device__ __forceinline__ void run() const {
    if constexpr (kPaged) {
      // A warp without a copy of a whole key block has none of any block: it leaves.
      const int copies = Shape::kBlockN / params.pages.box_rows * KTile::kPanels;
      if (static_cast<int>(threadIdx.x / 32) >= copies) return;
    }
    if (leader()) {
      tma::prefetch_map(&params.q_map);
      tma::prefetch_map(&params.k_map);
      tma::prefetch_map(&params.v_map);
    }
    const auto scheduler = tile_scheduler<Shape>(params);
    Ring kv;
    uint32_t tile_parity = 0;  // of the tiles with keys this block has loaded so far
    for (FwdTileCursor c = scheduler.first(); scheduler.valid(c); scheduler.advance(c)) {
      const FwdTileWork w = scheduler.work(params.p, c);
      if (!w.has_rows() || !w.has_keys()) continue;  // the MMA warpgroups skip it alike
      const int last = w.kb.end - 1;
      Box k_box = lookup(w, last);
      load_k(w, last, k_box, kv);

      const uint32_t q_full = addr(&smem.bar.q_full);
      mbarrier::wait(addr(&smem.bar.q_empty), tile_parity ^ 1);
      if (leader()) {
        mbarrier::arrive_expect_tx(q_full, QTile::kBytes);
        if constexpr (Shape::kPackGqa) {
          // The packed map's coordinates run (col, head, row, batch) (fwd_launch.cuh).
          tma::load_operand_tile<QTile>(addr(smem.q), &params.q_map, w.h, w.q_row, w.batch,
                                        q_full, tma::CacheHint::kEvictFirst);
        } else {
          tma::load_operand_tile<QTile>(addr(smem.q), &params.q_map, w.q_row, w.h, w.batch,
                                        q_full, tma::CacheHint::kEvictFirst);
        }
      }

      Ring v_at = kv;  // V of block n + 1 goes where K of block n + 1 went, from its boxes
      for (int n = last - 1; n >= w.kb.begin; --n) {
        const Box v_box = k_box;
        k_box = lookup(w, n);
        kv.advance();
        load_k(w, n, k_box, kv);
        load_v(w, n + 1, v_box, v_at);
        v_at = kv;
      }
      load_v(w, w.kb.begin, k_box, v_at);
      kv.advance();
      tile_parity ^= 1;
    }
  }
};

}  // namespace flashattn::cuda::sm90
