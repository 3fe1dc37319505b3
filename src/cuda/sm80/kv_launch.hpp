// Host entry points of the sm80 KV-cache attention kernel, one per (element type, compiled
// head dim, cache element type); each is defined in a generated file of
// src/cuda/instantiations/ (scripts/codegen.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm80 {

// One launch of the attention over the (already appended) cache. With num_splits > 1 the
// splits write their fp32 partials to partial_out / partial_lse, merged by the combine kernel.
struct KvLaunch {
  bool decode = false;  // the decode tile, else the prefill tile (kvcache_tuning.hpp)
  int num_splits = 1;
  float* partial_out = nullptr;
  float* partial_lse = nullptr;
};

// `params.head_dim` <= D (a multiple of 8, of 16 with an e4m3 cache); q and the cache 16-byte
// aligned with strides that are multiples of 16 bytes. C, the cache's element type: T, or
// __nv_fp8_e4m3 (the params' kv_e4m3, read through k_descale and v_descale).
template <class T, int D, class C = T>
Status run_kvcache(const core::KVCacheParams& params, const KvLaunch& launch,
                   cudaStream_t stream);

// Dynamic shared memory of the decode or prefill kernel for head dim D.
template <class T, int D, class C = T>
int kvcache_smem_bytes(bool decode);

}  // namespace flashattn::cuda::sm80
