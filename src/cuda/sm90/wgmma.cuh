// warpgroup:: asynchronous warpgroup matrix multiply-accumulate (wgmma, sm_90a only).
// The 128 threads of a warpgroup (4 consecutive warps, the first at a warp index divisible
// by 4) execute every function here together, with the same arguments except registers.
//
//   D[64 x N] (+)= A[64 x 16] . B[16 x N]      fp32 D, bf16 or fp16 A and B
//   D[64 x N] (+)= A[64 x 32] . B[32 x N]      fp32 D, e4m3 A and B (T = __nv_fp8_e4m3)
//
// D lives in N / 2 fp32 registers per thread (wgmma_fragments.cuh gives the map). B is read
// from shared memory through a descriptor (wgmma_descriptor.cuh); A either through a
// descriptor too (mma_ss) or from four 32-bit registers per thread (mma_rs). kTransA /
// kTransB select the MN-major form of a shared-memory operand (A stored [K][M], B stored
// [K][N], e.g. V of P V); false is the K-major form (B stored [N][K], e.g. K of Q K^T).
// e4m3 operands have only the K-major form (wgmma_fragments.cuh has their register layout).
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
#include <cuda_fp8.h>

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

// One specialization per (N, element type): the instruction's register list has N / 2 entries,
// which inline asm can only spell out literally, so scripts/codegen.py writes them for every N
// that is a multiple of 16. Operand numbering of both forms: the C = N / 2 accumulators are
// %0 .. %(C-1), then
//   ss: desc_a, desc_b, accumulate, trans_a, trans_b            = %C .. %(C+4)
//   rs: a[0..3], desc_b, accumulate, trans_b                     = %C .. %(C+6)
// `accumulate` is a run-time value turned into the scale-d predicate (false: D = A B).
template <int N, class T>
struct Mma;

#include "cuda/sm90/wgmma_instructions.inc"

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
