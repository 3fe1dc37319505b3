// The Hopper forward's epilogue: one MMA warpgroup's 64 rows of O, normalized, out of the
// registers and into the caller's output, and their lse.
//
// Where FwdStorage stages O (kStagesO: the FP8 forward, where shared memory has room), O goes
// through shared memory so that the global stores are whole 16-byte chunks of consecutive
// columns, row after row, whatever the output's strides; each warpgroup stages its own rows,
// so the warpgroups do not wait for each other. Otherwise (every 16-bit forward) each thread
// stores its pairs of columns straight from registers: the four threads of a quad write 16
// consecutive bytes of a row, and the quads' stores of one row meet in L2 before they reach
// memory. Rows past the sequence are not
// written. With packed GQA each row goes to its own query and head.
//
// FP8: O is multiplied by v_descale of the tile's (batch entry, KV head), and the lse loses the
// 2^kPLog2Offset the mainloop put on the weights.
#pragma once

#include <math_constants.h>

#include <cstdint>

#include "core/sequence.hpp"
#include "cuda/common/online_softmax.cuh"
#include "cuda/prim/math.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/sm90/fwd_mainloop.cuh"
#include "cuda/sm90/fwd_params.cuh"
#include "cuda/sm90/fwd_scheduler.cuh"
#include "cuda/sm90/fwd_shape.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace flashattn::cuda::sm90 {

template <class T, class Shape>
struct FwdEpilogue {
  static constexpr int kHeadDimV = Shape::kHeadDimV;
  static constexpr int kChunksPerRow = kHeadDimV / 8;  // 16-byte chunks of an output row
  using OTile = typename Shape::OTile;
  using Storage = FwdStorage<Shape>;

  const FwdSm90Params& params;
  Storage& smem;
  const int warpgroup;
  const int thread;  // in the warpgroup

  // The output row of the warpgroup's first row (rows of one head follow at row_stride).
  __device__ __forceinline__ T* out_rows(const FwdTileWork& w) const {
    const core::Operand& out = params.p.out;
    return static_cast<T*>(out.ptr) + core::element_offset(out, w.seq.batch, w.seq.q_row0, w.h) +
           static_cast<int64_t>(w.m0 + 64 * warpgroup) * out.row_stride;
  }

  // The output row of the warpgroup's row `row`: from out_rows, or with packed GQA at the
  // row's own query and head.
  __device__ __forceinline__ T* out_row(const FwdTileWork& w, T* rows, int64_t row_stride,
                                        int row) const {
    if constexpr (Shape::kPackGqa) {
      const core::Operand& out = params.p.out;
      const int r = 64 * warpgroup + row;
      return static_cast<T*>(out.ptr) + core::element_offset(out, w.seq.batch,
                                                             w.seq.q_row0 + w.query_of(r),
                                                             w.head_of(r));
    } else {
      return rows + row * row_stride;
    }
  }

  __device__ __forceinline__ void store_lse(const FwdTileWork& w, const float (&lse)[1][2]) const {
    if (params.p.lse == nullptr || thread % 4 != 0) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = 64 * warpgroup + thread / 32 * 16 + thread % 32 / 4 + 8 * half;
      if (row < w.rows) {
        params.p.lse[core::lse_offset(params.p, w.seq, w.head_of(row), w.query_of(row))] =
            lse[0][half];
      }
    }
  }

  // O (unnormalized) and its softmax statistics from the mainloop, whose score unit for the
  // tile is `unit`.
  template <int R>
  __device__ __forceinline__ void store(const FwdTileWork& w, float (&o)[R],
                                        RowSoftmax<1>& softmax, float unit) const {
    static_assert(R == kHeadDimV / 2, "O of the warpgroup's rows");
    float lse[1][2];
    softmax.finish(as_row_tiles(o), unit, lse);
    if constexpr (Shape::kFp8) {
      constexpr float kLn2 = 0.6931471805599453f;
      constexpr float kOffset = FwdMainloop<T, Shape>::kPLog2Offset * kLn2;
      lse[0][0] -= kOffset;
      lse[0][1] -= kOffset;
      const float v_descale = params.p.v_descale.at(w.b, w.hk);
#pragma unroll
      for (int i = 0; i < R; ++i) o[i] *= v_descale;
    }

    if constexpr (Storage::kStagesO) {
      store_staged(w, o);
    } else {
      store_from_registers(w, o);
    }
    store_lse(w, lse);
  }

  // O (normalized) through this warpgroup's rows of the staging tile.
  template <int R>
  __device__ __forceinline__ void store_staged(const FwdTileWork& w, const float (&o)[R]) const {
    // Every thread of the warpgroup has read its rows of the previous tile's O.
    prim::named_sync(kFwdWarpgroupBarrier + warpgroup, 128);
    const uint32_t tile = prim::smem_addr(smem.o);
    const int row0 = 64 * warpgroup + thread / 32 * 16 + thread % 32 / 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int j = 0; j < kHeadDimV / 8; ++j) {
        const uint32_t packed = prim::thread::pack2<T>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
        const uint32_t at = tile + OTile::byte_offset(row0 + 8 * half, 8 * j + 2 * (thread % 4));
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(packed) : "memory");
      }
    }
    prim::named_sync(kFwdWarpgroupBarrier + warpgroup, 128);

    T* out = out_rows(w);
    const int64_t row_stride = params.p.out.row_stride;
    const int rows = w.rows - 64 * warpgroup;
#pragma unroll
    for (int i = thread; i < 64 * kChunksPerRow; i += 128) {
      const int row = i / kChunksPerRow;
      const int chunk = i % kChunksPerRow;
      uint4 v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(tile + OTile::byte_offset(64 * warpgroup + row, 8 * chunk))
                   : "memory");
      if (row < rows) *reinterpret_cast<uint4*>(out_row(w, out, row_stride, row) + 8 * chunk) = v;
    }
  }

  // O (normalized) from registers: this thread's columns 8 j + 2 (thread % 4) + {0, 1} of its
  // two rows, for every j.
  template <int R>
  __device__ __forceinline__ void store_from_registers(const FwdTileWork& w,
                                                      const float (&o)[R]) const {
    T* out = out_rows(w);
    const int64_t row_stride = params.p.out.row_stride;
    const int rows = w.rows - 64 * warpgroup;
    const int row0 = thread / 32 * 16 + thread % 32 / 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + 8 * half;
      if (row >= rows) continue;
      T* dst = out_row(w, out, row_stride, row) + 2 * (thread % 4);
#pragma unroll
      for (int j = 0; j < kHeadDimV / 8; ++j) {
        *reinterpret_cast<uint32_t*>(dst + 8 * j) =
            prim::thread::pack2<T>(o[4 * j + 2 * half], o[4 * j + 2 * half + 1]);
      }
    }
  }

  // A tile whose rows see no key: zero rows and lse = -inf, straight from registers.
  __device__ __forceinline__ void store_empty(const FwdTileWork& w) const {
    T* out = out_rows(w);
    const int64_t row_stride = params.p.out.row_stride;
    const int rows = w.rows - 64 * warpgroup;
    for (int i = thread; i < 64 * kChunksPerRow; i += 128) {
      const int row = i / kChunksPerRow;
      if (row < rows) {
        *reinterpret_cast<uint4*>(out_row(w, out, row_stride, row) + 8 * (i % kChunksPerRow)) =
            make_uint4(0, 0, 0, 0);
      }
    }
    const float lse[1][2] = {{-CUDART_INF_F, -CUDART_INF_F}};
    store_lse(w, lse);
  }
};

}  // namespace flashattn::cuda::sm90
