// warpgroup:: asynchronous warpgroup matrix multiply-accumulate (wgmma, sm_90a only).
// The 128 threads of a warpgroup (4 consecutive warps, the first at a warp index divisible
// by 4) execute every function here together, with the same arguments except registers.
//
//   D[64 x N] (+)= A[64 x 16] . B[16 x N]      fp32 D, bf16 or fp16 A and B
//
// D lives in N / 2 fp32 registers per thread (wgmma_fragments.cuh gives the map). B is read
// from shared memory through a descriptor (wgmma_descriptor.cuh); A either through a
// descriptor too (mma_ss) or from four 32-bit registers per thread (mma_rs). kTransA /
// kTransB select the MN-major form of a shared-memory operand (A stored [K][M], B stored
// [K][N], e.g. V of P V); false is the K-major form (B stored [N][K], e.g. K of Q K^T).
//
// Ordering, which the hardware does not do for us:
//   - fence() before the first mma of a chain and whenever this thread wrote D or A's
//     registers since the last one (wgmma reads them asynchronously);
//   - shared memory written by ordinary stores or cp.async must be followed by
//     fence.proxy.async.shared::cta in the writing threads, then a barrier, before an mma
//     reads it (wgmma reads through the async proxy);
//   - commit_group() closes the mmas issued so far into a group; wait_group<P>() returns
//     once at most P groups are pending. D (and A's registers) must not be touched before
//     the wait that covers them; fence_operands() keeps the compiler from moving such
//     accesses across the asm statements.
// Callers compile these only in the sm_90a device pass (__CUDA_ARCH_FEAT_SM90_ALL); any
// other target rejects the instructions at build time rather than at run time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::sm90::warpgroup {

__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int Pending>
__device__ __forceinline__ void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}

// Shared memory written through the generic proxy (st.shared, cp.async) becomes visible to
// wgmma and TMA reads of the same block after this fence in the writer and a barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Pins each register's value at this point: the compiler may not move its reads or writes
// across, which it otherwise could, as the asm of an mma does not say when D is written.
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int R>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// One specialization per (N, element type), generated below: the instruction's register
// list has N / 2 entries, which inline asm can only spell out literally.
template <int N, class T>
struct Mma;

// Operand numbering of both forms: the C = N / 2 accumulators are %0 .. %(C-1), then
//   ss: desc_a, desc_b, accumulate, trans_a, trans_b            = %C .. %(C+4)
//   rs: a[0..3], desc_b, accumulate, trans_b                     = %C .. %(C+6)
// `accumulate` is a run-time value turned into the scale-d predicate (false: D = A B).
// clang-format off

// "%<t>0, ..., %<t>9, ": the ten operand numbers with tens digits t (empty: 0-9).
#define FA_WGMMA_TENS(t)                                                                        \
  "%" #t "0, %" #t "1, %" #t "2, %" #t "3, %" #t "4, "                                          \
  "%" #t "5, %" #t "6, %" #t "7, %" #t "8, %" #t "9, "
#define FA_WGMMA_ACC8(b)                                                                        \
  "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]),                       \
  "+f"(d[(b) + 4]), "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7])
#define FA_WGMMA_ACC32(b) \
  FA_WGMMA_ACC8(b), FA_WGMMA_ACC8((b) + 8), FA_WGMMA_ACC8((b) + 16), FA_WGMMA_ACC8((b) + 24)

// Per accumulator count C: the register list and the asm output operands.
#define FA_WGMMA_LIST_16 FA_WGMMA_TENS() "%10, %11, %12, %13, %14, %15"
#define FA_WGMMA_OUT_16 FA_WGMMA_ACC8(0), FA_WGMMA_ACC8(8)
#define FA_WGMMA_LIST_32 \
  FA_WGMMA_TENS() FA_WGMMA_TENS(1) FA_WGMMA_TENS(2) "%30, %31"
#define FA_WGMMA_OUT_32 FA_WGMMA_ACC32(0)
#define FA_WGMMA_LIST_64                                                                        \
  FA_WGMMA_TENS() FA_WGMMA_TENS(1) FA_WGMMA_TENS(2) FA_WGMMA_TENS(3) FA_WGMMA_TENS(4)           \
  FA_WGMMA_TENS(5) "%60, %61, %62, %63"
#define FA_WGMMA_OUT_64 FA_WGMMA_ACC32(0), FA_WGMMA_ACC32(32)
#define FA_WGMMA_LIST_128                                                                       \
  FA_WGMMA_TENS() FA_WGMMA_TENS(1) FA_WGMMA_TENS(2) FA_WGMMA_TENS(3) FA_WGMMA_TENS(4)           \
  FA_WGMMA_TENS(5) FA_WGMMA_TENS(6) FA_WGMMA_TENS(7) FA_WGMMA_TENS(8) FA_WGMMA_TENS(9)          \
  FA_WGMMA_TENS(10) FA_WGMMA_TENS(11) "%120, %121, %122, %123, %124, %125, %126, %127"
#define FA_WGMMA_OUT_128 \
  FA_WGMMA_ACC32(0), FA_WGMMA_ACC32(32), FA_WGMMA_ACC32(64), FA_WGMMA_ACC32(96)

// N, C = N / 2, the element type and its PTX name, then the operand numbers C .. C+6 (checked).
#define FA_WGMMA_DEFINE(N, C, T, PTX, o0, o1, o2, o3, o4, o5, o6)                               \
  template <>                                                                                   \
  struct Mma<N, T> {                                                                            \
    static_assert(2 * (C) == (N) && (o0) == (C) && (o1) == (C) + 1 && (o2) == (C) + 2 &&        \
                  (o3) == (C) + 3 && (o4) == (C) + 4 && (o5) == (C) + 5 && (o6) == (C) + 6,     \
                  "wgmma operand numbering");                                                   \
    template <bool kTransA, bool kTransB>                                                       \
    static __device__ __forceinline__ void ss(float (&d)[C], uint64_t desc_a, uint64_t desc_b,  \
                                              bool accumulate) {                                \
      asm volatile(                                                                             \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #o2 ", 0;\n"                                     \
          "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX                         \
          " {" FA_WGMMA_LIST_##C "}, %" #o0 ", %" #o1 ", p, 1, 1, %" #o3 ", %" #o4 ";\n}\n"     \
          : FA_WGMMA_OUT_##C                                                                    \
          : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)),                        \
            "n"(static_cast<int>(kTransA)), "n"(static_cast<int>(kTransB)));                    \
    }                                                                                           \
    template <bool kTransB>                                                                     \
    static __device__ __forceinline__ void rs(float (&d)[C], const uint32_t (&a)[4],            \
                                              uint64_t desc_b, bool accumulate) {               \
      asm volatile(                                                                             \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #o5 ", 0;\n"                                     \
          "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX "." PTX                         \
          " {" FA_WGMMA_LIST_##C "}, {%" #o0 ", %" #o1 ", %" #o2 ", %" #o3 "}, %" #o4           \
          ", p, 1, 1, %" #o6 ";\n}\n"                                                           \
          : FA_WGMMA_OUT_##C                                                                    \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b),                            \
            "r"(static_cast<int>(accumulate)), "n"(static_cast<int>(kTransB)));                 \
    }                                                                                           \
  };

#define FA_WGMMA_DEFINE_TYPES(N, C, o0, o1, o2, o3, o4, o5, o6)                                 \
  FA_WGMMA_DEFINE(N, C, __nv_bfloat16, "bf16", o0, o1, o2, o3, o4, o5, o6)                      \
  FA_WGMMA_DEFINE(N, C, __half, "f16", o0, o1, o2, o3, o4, o5, o6)

FA_WGMMA_DEFINE_TYPES(32, 16, 16, 17, 18, 19, 20, 21, 22)
FA_WGMMA_DEFINE_TYPES(64, 32, 32, 33, 34, 35, 36, 37, 38)
FA_WGMMA_DEFINE_TYPES(128, 64, 64, 65, 66, 67, 68, 69, 70)
FA_WGMMA_DEFINE_TYPES(256, 128, 128, 129, 130, 131, 132, 133, 134)

#undef FA_WGMMA_DEFINE_TYPES
#undef FA_WGMMA_DEFINE
#undef FA_WGMMA_OUT_128
#undef FA_WGMMA_LIST_128
#undef FA_WGMMA_OUT_64
#undef FA_WGMMA_LIST_64
#undef FA_WGMMA_OUT_32
#undef FA_WGMMA_LIST_32
#undef FA_WGMMA_OUT_16
#undef FA_WGMMA_LIST_16
#undef FA_WGMMA_ACC32
#undef FA_WGMMA_ACC8
#undef FA_WGMMA_TENS
// clang-format on

template <int N, class T, bool kTransA, bool kTransB>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b,
                                       bool accumulate) {
  Mma<N, T>::template ss<kTransA, kTransB>(d, desc_a, desc_b, accumulate);
}

template <int N, class T, bool kTransB>
__device__ __forceinline__ void mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b,
                                       bool accumulate) {
  Mma<N, T>::template rs<kTransB>(d, a, desc_b, accumulate);
}

}  // namespace flashattn::cuda::sm90::warpgroup
