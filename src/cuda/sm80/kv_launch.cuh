// The launcher of kv_kernel for the decode and prefill tiles. Included by the generated
// instantiation files.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "cuda/kvcache_tuning.hpp"
#include "cuda/sm80/fwd_launch.cuh"
#include "cuda/sm80/kv_kernel.cuh"
#include "cuda/sm80/kv_launch.hpp"

namespace flashattn::cuda::sm80 {

template <int D, int CacheBytes>
struct KvDecodeTile {
  static constexpr KvTile value = kv_decode_tile(D, CacheBytes);
};
template <int D>
struct KvPrefillTile {
  static constexpr KvTile value = kv_prefill_tile(D);
};

template <class T, int D, class C, class TileT>
Status launch_kvcache(const core::KVCacheParams& p, const KvLaunch& launch, cudaStream_t stream) {
  using S = KvShape<D, TileT, sizeof(C)>;
  auto kernel = &kv_kernel<T, D, TileT, C>;
  if (S::kSmemBytes > 48 * 1024) {
    FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes));
  }
  const int packed_rows = p.seqlen_q * (p.nheads / p.nheads_k);
  const int m_blocks = (packed_rows + S::kBlockM - 1) / S::kBlockM;
  const dim3 grid(m_blocks * launch.num_splits, p.nheads_k, p.batch);
  KvRun run{score_scales(p), launch.num_splits, launch.partial_out, launch.partial_lse};
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(p, run);
  return cuda_status(cudaGetLastError(), "launching the sm80 KV-cache kernel");
}

template <class T, int D, class C>
Status run_kvcache(const core::KVCacheParams& params, const KvLaunch& launch,
                   cudaStream_t stream) {
  if (launch.decode) {
    return launch_kvcache<T, D, C, KvDecodeTile<D, sizeof(C)>>(params, launch, stream);
  }
  return launch_kvcache<T, D, C, KvPrefillTile<D>>(params, launch, stream);
}

template <class T, int D, class C>
int kvcache_smem_bytes(bool decode) {
  return decode ? KvShape<D, KvDecodeTile<D, sizeof(C)>, sizeof(C)>::kSmemBytes
                : KvShape<D, KvPrefillTile<D>, sizeof(C)>::kSmemBytes;
}

}  // namespace flashattn::cuda::sm80
