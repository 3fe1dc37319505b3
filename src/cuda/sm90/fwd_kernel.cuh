// The FlashAttention forward on Hopper (sm_90a): warp-specialized, TMA-fed, wgmma-computed,
// persistent. Composed of
//   fwd_scheduler.cuh  which tiles a block takes, and what each covers
//   fwd_producer.cuh   warpgroup 0: the TMA loads of Q, K and V into the rings
//   fwd_transpose_v.cuh  FP8 only, warps 1..3 of warpgroup 0: V transposed for e4m3 wgmma
//   fwd_mainloop.cuh   warpgroups 1..: S = Q K^T, softmax, O += P V per key block
//   fwd_epilogue.cuh   O and lse out
// over the shared memory of fwd_shape.cuh. kPaged reads K and V through a paged KV cache's
// block_table (the cache's prefill); only the producer differs. Shape::kFp8 reads e4m3 q, k
// and v (T is then the output's type). kDropout applies dropout to the weights in the
// mainloop (fwd_mainloop.cuh); a KV cache call and an FP8 call have no dropout, so they never
// meet it.
//
// The body is compiled in the sm_90a device pass only; the dispatch runs this kernel only on a
// device whose code for it came from that pass (DeviceLimits::sm90a).
#pragma once

#include <cstdint>

#include "cuda/prim/math.cuh"
#include "cuda/sm90/fwd_epilogue.cuh"
#include "cuda/sm90/fwd_mainloop.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_producer.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/fwd_transpose_v.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/registers.cuh"

namespace flashattn::cuda::sm90 {

template <class Shape>
__device__ __forceinline__ void init_barriers(FwdStorage<Shape>& smem) {
  auto init = [](uint64_t& bar, uint32_t count) { mbarrier::init(prim::smem_addr(&bar), count); };
  init(smem.bar.q_full, 1);
  init(smem.bar.q_empty, Shape::kMmaWarps);
  for (int i = 0; i < Shape::kStages; ++i) {
    init(smem.bar.k_full[i], 1);
    // FP8: the transposing warps fill V, one arrival each; TMA fills the raw ring.
    init(smem.bar.v_full[i], Shape::kFp8 ? Shape::kTransposeWarps : 1);
    init(smem.bar.k_empty[i], Shape::kMmaWarps);
    init(smem.bar.v_empty[i], Shape::kMmaWarps);
    init(smem.bar.raw_full[i], 1);
    init(smem.bar.raw_empty[i], Shape::kTransposeWarps > 0 ? Shape::kTransposeWarps : 1);
  }
  mbarrier::fence_init();
}

// Each MMA warpgroup: its rows of every tile of the block.
template <class T, class Shape, bool kDropout>
__device__ __forceinline__ void run_mma_warpgroup(const FwdSm90Params& params,
                                                  FwdStorage<Shape>& smem, int warpgroup,
                                                  int thread) {
  const auto scheduler = tile_scheduler<Shape>(params);
  FwdMainloop<T, Shape, kDropout> mainloop(params, smem, warpgroup, thread);
  const FwdEpilogue<T, Shape> epilogue{params, smem, warpgroup, thread};
  RingPosition<Shape::kStages> kv;
  uint32_t tile_parity = 0;  // of the tiles with keys this block has computed so far
  mainloop.start_turns();
  for (FwdTileCursor c = scheduler.first(); scheduler.valid(c); scheduler.advance(c)) {
    const FwdTileWork w = scheduler.work(params.p, c);
    if (!w.has_rows()) continue;
    if (!w.has_keys()) {  // the producer skips it too
      epilogue.store_empty(w);
      continue;
    }
    mainloop.run(w, kv, tile_parity, 128 * warpgroup + thread);
    epilogue.store(w, mainloop.o, mainloop.softmax, mainloop.scores.unit);
    tile_parity ^= 1;
  }
}

template <class T, class Shape, bool kPaged, bool kDropout>
__global__ void __launch_bounds__(Shape::kThreads, Shape::kBlocksPerSm)
    fwd_kernel(const __grid_constant__ FwdSm90Params params) {
  static_assert(!(kPaged && kDropout), "a KV cache call has no dropout");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  // The swizzled tiles need 1024-byte alignment, which dynamic shared memory does not promise.
  const uint32_t raw = prim::smem_addr(smem_raw);
  auto& smem = *reinterpret_cast<FwdStorage<Shape>*>(smem_raw + ((1024 - raw % 1024) % 1024));
  if (threadIdx.x == 0) init_barriers(smem);
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    warpgroup::lower_registers<Shape::kProducerRegisters>();
    using Producer = FwdProducer<Shape, kPaged>;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    if (threadIdx.x < Producer::kThreads) {
      Producer{params, smem}.run();
    } else if constexpr (Shape::kFp8) {
      if (warp >= 1 && warp <= Shape::kTransposeWarps) {
        FwdTransposeV<Shape>{params, smem, warp - 1, static_cast<int>(threadIdx.x) % 32}.run();
      }
    }
  } else {
    warpgroup::raise_registers<Shape::kMmaRegisters>();
    run_mma_warpgroup<T, Shape, kDropout>(params, smem, warpgroup - 1,
                                          static_cast<int>(threadIdx.x) % 128);
  }
#endif
}

}  // namespace flashattn::cuda::sm90
