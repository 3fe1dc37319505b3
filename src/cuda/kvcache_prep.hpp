// The small kernels around the KV-cache attention kernel, all on the caller's stream:
//   append: k_new (rotated when rotary is on) and v_new into the cache at cache_seqlens[b]
//     (an e4m3 cache: divided by the descale and quantized as the CPU backends do);
//   stage_q: q (rotated when rotary is on) into an aligned [batch, seqlen_q, nheads, d] copy;
//   used_keys: the keys per entry after the append, as the forward kernel's seqused_k;
//   combine: the split-KV partials merged into out (+ lse) with core/softmax_state.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// The most splits a call uses (each lane of the combine kernel holds a quarter of their lse).
inline constexpr int kMaxKvSplits = 128;

Status launch_append(const core::KVCacheParams& params, cudaStream_t stream);

// `staged` holds batch * seqlen_q * nheads * head_dim elements of the params' dtype.
Status launch_stage_q(const core::KVCacheParams& params, void* staged, cudaStream_t stream);

// used_keys[b] = cache_seqlens[b] + appended rows: the keys of entry b after the append.
Status launch_used_keys(const core::KVCacheParams& params, int32_t* used_keys,
                        cudaStream_t stream);

// partial_out [splits][batch][nheads][seqlen_q][head_dim], partial_lse [splits][...][seqlen_q].
// `dependent` (sm_90 and newer): launched as a programmatic dependent of the attention kernel
// before it on the stream, whose blocks allow it at their start; its blocks then become
// resident during that kernel and wait for its end, so the launch latency is hidden.
Status launch_combine(const core::KVCacheParams& params, int num_splits, const float* partial_out,
                      const float* partial_lse, bool dependent, cudaStream_t stream);

}  // namespace flashattn::cuda
