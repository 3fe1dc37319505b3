// How the CUDA forward runs a call: the one decision shared by check_forward (and so by
// supported()), forward_workspace_size and forward, so they never disagree.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

enum class FwdKernel {
  kNone,
  kSm80,  // mma.sync FlashAttention-2 kernel (sm80/), sm_80 and newer
  kSm90,  // warp-specialized wgmma + TMA kernel (sm90/fwd_kernel.cuh), sm_90a
  kSm90Fp8,  // the same kernel on e4m3 q, k, v (FwdShape::kFp8), sm_90a
  // The KV-cache kernel's split-KV decode tile (kvcache.cu) over k and v read as a full cache:
  // the decode route for a few query rows per KV head (forward.cu).
  kKvDecode,
};

struct FwdPlan {
  FwdKernel kernel = FwdKernel::kNone;
  int head_dim = 0;     // the compiled head dim that runs (>= params.head_dim)
  int block_m = 0;      // query rows per block (or tile) of that kernel
  bool padded = false;  // q, k, v and out go through a padded, aligned copy in the workspace
  uint64_t workspace_bytes = 0;  // kKvDecode: the split partials (and a staged q)
};

// Ok and the plan when `params` can run on `device`; otherwise why not (kUnsupported).
Status choose_kernel(const core::AttentionParams& params, int device, FwdPlan* plan);

// choose_kernel's step that needs no device: the family of the first entry of
// instantiations/fwd_list.inc that takes `as_run` (the params the kernel sees, with a compiled
// head dim and an aligned layout) on a device that does or does not run sm_90a code; kNone if
// none does. Tests check the routing with it where no GPU is present.
FwdKernel first_forward_family(const core::AttentionParams& as_run, bool sm90a);

// The same for the forward over a paged KV cache (forward_paged.cu; kvcache.cu runs it for a
// prefill): the first family of instantiations/fwd_paged_list.inc that the device runs and that
// accepts the call. `params` must need no padding (choose_kernel says so for them).
Status choose_paged_kernel(const core::KVCacheParams& params, int device, FwdPlan* plan);

// Runs `params` on the family `kernel` that choose_paged_kernel picked.
Status forward_paged(const core::KVCacheParams& params, FwdKernel kernel, cudaStream_t stream);

// The decode route (kvcache.cu): whether the KV-cache kernel's decode tile runs `params` (no
// append, no rotary) in place, and if so the workspace it needs; then the run.
bool kvcache_decodes_in_place(const core::KVCacheParams& params, int device,
                              uint64_t* workspace_bytes);
Status kvcache_decode(const core::KVCacheParams& params, void* workspace, cudaStream_t stream);

}  // namespace flashattn::cuda
