// The Hopper forward's producer: one thread that issues every TMA load of the block's tiles.
//
// Per tile with keys: K of the first key block (the last one in key order: the mainloop walks
// the keys from the end), then Q once the MMA warpgroups are done with the previous tile's Q,
// then K and V of the remaining blocks with V one block behind K, the order in which the
// mainloop consumes them (it multiplies P V of the block before the one whose S = Q K^T it
// just issued). Each K and V buffer of the ring is refilled once every MMA warp has released
// it; where O is staged in the V ring, the tile's first V also waits for the previous tile's
// epilogue to have read O back out, while its first two K blocks are loaded during it.
#pragma once

#include <cstdint>

#include "cuda/prim/math.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/ring.cuh"
#include "cuda/sm90/tma_load.cuh"

namespace flashattn::cuda::sm90 {

template <class Shape>
struct FwdProducer {
  using Storage = FwdStorage<Shape>;
  using QTile = typename Shape::QTile;
  using KTile = typename Shape::KTile;
  using VTile = typename Shape::VTile;
  using Ring = RingPosition<Shape::kStages>;

  const FwdSm90Params& params;
  Storage& smem;

  __device__ __forceinline__ uint32_t addr(const void* p) const { return prim::smem_addr(p); }

  // Key block n of K or V (`map`) into the ring buffer `tile` at `at`, once it is empty.
  template <class Tile>
  __device__ __forceinline__ void load_keys(uint8_t* tile, uint64_t& full, uint64_t& empty,
                                            const CUtensorMap* map, const FwdTileWork& w, int n,
                                            const Ring& at) const {
    mbarrier::wait(addr(&empty), at.empty_parity());
    mbarrier::arrive_expect_tx(addr(&full), Tile::kBytes);
    tma::load_operand_tile<Tile>(addr(tile), map, w.k_row0 + n * Shape::kBlockN, w.hk, w.batch,
                                 addr(&full), tma::CacheHint::kEvictLast);
  }
  __device__ __forceinline__ void load_k(const FwdTileWork& w, int n, const Ring& at) const {
    load_keys<KTile>(smem.k[at.slot], smem.bar.k_full[at.slot], smem.bar.k_empty[at.slot],
                     &params.k_map, w, n, at);
  }
  __device__ __forceinline__ void load_v(const FwdTileWork& w, int n, const Ring& at) const {
    load_keys<VTile>(smem.v[at.slot], smem.bar.v_full[at.slot], smem.bar.v_empty[at.slot],
                     &params.v_map, w, n, at);
  }

  __device__ __forceinline__ void run() const {
    tma::prefetch_map(&params.q_map);
    tma::prefetch_map(&params.k_map);
    tma::prefetch_map(&params.v_map);
    const FwdTileScheduler<Shape::kBlockM, Shape::kBlockN> scheduler{
        params.m_blocks, params.tiles, params.paired_tiles};
    Ring kv;
    uint32_t tile_parity = 0;  // of the tiles with keys this block has loaded so far
    for (FwdTileCursor c = scheduler.first(); scheduler.valid(c); scheduler.advance(c)) {
      const FwdTileWork w = scheduler.work(params.p, c);
      if (!w.has_rows() || !w.has_keys()) continue;  // the MMA warpgroups skip it alike
      const int last = w.kb.end - 1;
      load_k(w, last, kv);

      const uint32_t q_full = addr(&smem.bar.q_full);
      mbarrier::wait(addr(&smem.bar.q_empty), tile_parity ^ 1);
      mbarrier::arrive_expect_tx(q_full, QTile::kBytes);
      tma::load_operand_tile<QTile>(addr(smem.q), &params.q_map, w.q_row, w.h, w.batch, q_full,
                                    tma::CacheHint::kEvictFirst);

      // V shares its ring with the previous tile's O staging (when Shape stages O there): the
      // first V waits for that epilogue, the second K does not.
      bool v_ring_free = !Storage::kOStagedInV;
      auto wait_v_ring = [&] {
        if (!v_ring_free) mbarrier::wait(addr(&smem.bar.o_empty), tile_parity ^ 1);
        v_ring_free = true;
      };
      Ring v_at = kv;  // V of block n + 1 goes where K of block n + 1 went
      for (int n = last - 1; n >= w.kb.begin; --n) {
        kv.advance();
        load_k(w, n, kv);
        wait_v_ring();
        load_v(w, n + 1, v_at);
        v_at = kv;
      }
      wait_v_ring();
      load_v(w, w.kb.begin, v_at);
      kv.advance();
      tile_parity ^= 1;
    }
  }
};

}  // namespace flashattn::cuda::sm90
