// The Hopper backward's epilogue: a block's dK (scaled) and dV, from the MMA warpgroups'
// fragments, into the outputs (staged in shared memory over Q and dO, then written in 16-byte
// row chunks where the outputs allow, else element by element), or, when a KV head's query
// heads are split among blocks (BwdWorkspace::kv_splits), as this split's fp32 share for
// bwd_combine_dkv to add. Every row of the key block up to key_rows is written (zeros where no
// query attends), nothing past it.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/prim/math.cuh"
#include "cuda/prim/named_barrier.cuh"
#include "cuda/prim/shared_access.cuh"
#include "cuda/sm90/bwd_shape.cuh"

namespace flashattn::cuda::sm90 {

template <class T, class S>
struct BwdEpilogue {
  static constexpr int D = S::kHeadDim;
  static constexpr int kBlockN = S::kBlockN;
  using KTile = typename S::KTile;
  using QTile = typename S::QTile;
  using Fragments = float[S::kKvCols / 2];

  const core::BackwardParams& p;
  int n0;                  // the key block's first key
  int key0, kv_col0;       // this warpgroup's keys and head-dim columns of dK / dV
  int frag_row, frag_col;  // this thread's fragment position (wgmma_fragments.cuh)
  int tid;

  // This split's share, fp32, of the KV head hk of sequence seq (BwdSequence).
  template <class Sequence>
  __device__ __forceinline__ void store_partial(const BwdWorkspace& w, const Sequence& seq,
                                                int b, int kv_split, int hk,
                                                const Fragments& dk, const Fragments& dv) const {
    const int rows = min(kBlockN, seq.key_rows - n0);
    const int64_t row_floats = static_cast<int64_t>(p.nheads_k) * D;
    const int64_t at = kv_split * w.kv_stride +
                       ((seq.varlen ? seq.k_start : static_cast<int64_t>(b) * p.seqlen_k) + n0) *
                           row_floats +
                       hk * D;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = key0 + frag_row + 8 * half;
      if (row < rows) {
#pragma unroll
        for (int j = 0; j < S::kKvCols / 8; ++j) {
          const int64_t e = at + row * row_floats + kv_col0 + 8 * j + frag_col;
          const int i = 4 * j + 2 * half;
          *reinterpret_cast<float2*>(w.dk_partial + e) =
              make_float2(dk[i] * p.scale, dk[i + 1] * p.scale);
          *reinterpret_cast<float2*>(w.dv_partial + e) = make_float2(dv[i], dv[i + 1]);
        }
      }
    }
  }

  // The outputs, of the KV head hk of sequence seq; stage_smem (in the shared window) and
  // stage (generic): Q's buffers, free once every warpgroup is done with them.
  template <class Sequence>
  __device__ __forceinline__ void store(const Sequence& seq, int hk, uint32_t stage_smem,
                                        const unsigned char* stage, const Fragments& dk,
                                        const Fragments& dv) const {
    static_assert(2 * KTile::kBytes <= 4 * QTile::kBytes, "dK and dV staged over Q and dO");
    const uint32_t dk_stage = stage_smem, dv_stage = stage_smem + KTile::kBytes;
    prim::named_sync(kMmaBarrier, S::kMmaThreads);  // every warpgroup is done with Q and dO
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = key0 + frag_row + 8 * half;
#pragma unroll
      for (int j = 0; j < S::kKvCols / 8; ++j) {
        const uint32_t offset = KTile::byte_offset(row, kv_col0 + 8 * j + frag_col);
        const int i = 4 * j + 2 * half;
        prim::store_shared(dk_stage + offset,
                           prim::thread::pack2<T>(dk[i] * p.scale, dk[i + 1] * p.scale));
        prim::store_shared(dv_stage + offset, prim::thread::pack2<T>(dv[i], dv[i + 1]));
      }
    }
    prim::named_sync(kMmaBarrier, S::kMmaThreads);
    T* dk_out = const_cast<T*>(seq.base(p.dk, hk, seq.k_start)) + n0 * p.dk.row_stride;
    T* dv_out = const_cast<T*>(seq.base(p.dv, hk, seq.k_start)) + n0 * p.dv.row_stride;
    const int rows = min(kBlockN, seq.key_rows - n0);
    auto chunks_fit = [](const T* out, int64_t row_stride) {
      return reinterpret_cast<uintptr_t>(out) % 16 == 0 && row_stride % 8 == 0;
    };
    if (chunks_fit(dk_out, p.dk.row_stride) && chunks_fit(dv_out, p.dv.row_stride)) {
      constexpr int kChunks = kBlockN * D / 8;
      for (int c = tid; c < 2 * kChunks; c += S::kMmaThreads) {
        const int tile = c / kChunks, row = c % kChunks / (D / 8), chunk = c % (D / 8);
        if (row < rows) {
          const uint4 chunk_value = *reinterpret_cast<const uint4*>(
              stage + tile * KTile::kBytes + KTile::byte_offset(row, 8 * chunk));
          T* out = tile == 0 ? dk_out + row * p.dk.row_stride : dv_out + row * p.dv.row_stride;
          *reinterpret_cast<uint4*>(out + 8 * chunk) = chunk_value;
        }
      }
    } else {
      for (int e = tid; e < 2 * kBlockN * D; e += S::kMmaThreads) {
        const int tile = e / (kBlockN * D), row = e % (kBlockN * D) / D, col = e % D;
        if (row < rows) {
          const T value = *reinterpret_cast<const T*>(stage + tile * KTile::kBytes +
                                                      KTile::byte_offset(row, col));
          T* out = tile == 0 ? dk_out + row * p.dk.row_stride : dv_out + row * p.dv.row_stride;
          out[col] = value;
        }
      }
    }
  }
};

}  // namespace flashattn::cuda::sm90
