// An e4m3 (FP8) K/V block on its way to the tensor cores: cp.async lands the cache's bytes in
// a staging tile (half the bytes of a 16-bit block, which is what a decoding step saves), and
// each block is then converted on chip into the 16-bit tile of q's type that the mma.sync
// loops of fwd_gemm.cuh read. The descales are not applied here: k's is folded into the score
// scale and v's into the output (kv_kernel.cuh), so the conversion is exact (every e4m3
// value is an fp16 and a bf16 value).
//
// The staging tile of a [Rows][D] e4m3 block is an SmemTile<Rows, D / 2>: the same swizzled
// 16-byte chunks, each holding 16 e4m3 values (columns 16c .. 16c+15), so the row copy of
// kv_rows.cuh fills it unchanged. Staged chunk c of a row becomes chunks 2c and 2c+1 of the
// converted SmemTile<Rows, D>. Consecutive threads take consecutive rows of one column chunk:
// each 8-thread phase of a 16-byte access then reads and writes 8 rows at the same chunk
// index, which the swizzle spreads over all 32 banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/smem_tile.cuh"
#include "cuda/prim/shared_access.cuh"

namespace flashattn::cuda {

// Two e4m3 values (the low and high byte of `pair`) as a packed pair of T, exactly.
template <class T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint16_t pair) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair),
                                                   __NV_E4M3);
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  } else {
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// The two e4m3 values of the low (kHigh false) or the high half of `word` as a packed fp16
// pair, exactly. From sm_89 the conversion reads the half in place, so the high half costs
// no shift to bring it down.
template <bool kHigh>
__device__ __forceinline__ uint32_t e4m3x2_half_to_half(uint32_t word) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t out;
  if constexpr (kHigh) {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n"
        : "=r"(out)
        : "r"(word));
  } else {
    asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n"
        : "=r"(out)
        : "r"(word));
  }
  return out;
#else
  return e4m3x2_to<__half>(static_cast<uint16_t>(kHigh ? word >> 16 : word & 0xFFFFu));
#endif
}

// 16 e4m3 values (one staged chunk) as 16 values of T (two chunks of the converted tile).
template <class T>
__device__ __forceinline__ void e4m3x16_to(const uint4& in, uint4& lo, uint4& hi) {
  const uint32_t words[4] = {in.x, in.y, in.z, in.w};
  uint32_t out[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if constexpr (std::is_same_v<T, __half>) {
      out[2 * w] = e4m3x2_half_to_half<false>(words[w]);
      out[2 * w + 1] = e4m3x2_half_to_half<true>(words[w]);
    } else {
      out[2 * w] = e4m3x2_to<T>(static_cast<uint16_t>(words[w] & 0xFFFFu));
      out[2 * w + 1] = e4m3x2_to<T>(static_cast<uint16_t>(words[w] >> 16));
    }
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

template <class T, int Rows, int D>
struct E4m3Block {
  using Staged = SmemTile<Rows, D / 2>;
  using Converted = SmemTile<Rows, D>;
  static constexpr int kChunks = D / 16;  // staged chunks per row

  // Rows [row0, row0 + Count) of the staged tile at `staged` into the converted tile at
  // `converted` (shared-window addresses), by Threads threads; `t` is this thread's index
  // among them. row0 is a multiple of 8. The caller orders these accesses against the copies
  // and reads around them (a barrier, or __syncwarp when a warp converts only its own rows).
  template <int Count, int Threads>
  static __device__ __forceinline__ void convert(uint32_t staged, uint32_t converted, int row0,
                                                 int t) {
    static_assert(Count % 8 == 0 && (Count * kChunks) % Threads == 0, "uneven conversion");
#pragma unroll
    for (int i = 0; i < Count * kChunks / Threads; ++i) {
      const int index = t + i * Threads;
      const int row = row0 + index % Count;
      const int chunk = index / Count;
      const uint4 in = prim::load_shared_u4(staged + 2 * Staged::chunk_offset(row, chunk));
      uint4 lo, hi;
      e4m3x16_to<T>(in, lo, hi);
      prim::store_shared(converted + 2 * Converted::chunk_offset(row, 2 * chunk), lo);
      prim::store_shared(converted + 2 * Converted::chunk_offset(row, 2 * chunk + 1), hi);
    }
  }
};

}  // namespace flashattn::cuda
