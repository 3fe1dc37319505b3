// The CUDA forward over a paged KV cache (a prefill against the cache, kvcache.cu): the kernel
// is the first entry of instantiations/fwd_paged_list.inc (the Hopper family first) for the
// call's dtype and head dim whose family the device runs and which accepts the call, as in the
// dense forward (forward.cu).
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.hpp"
#include "cuda/device_limits.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda/operand_traits.hpp"
#include "cuda/sm80/fwd_launch.hpp"
#include "cuda/sm90/fwd_launch.hpp"

namespace flashattn::cuda {

Status choose_paged_kernel(const core::KVCacheParams& p, int device, FwdPlan* plan) {
  *plan = FwdPlan{};
  DeviceLimits limits;
  const Status queried = device_limits(device, &limits);
  if (!queried.ok()) return queried;
  int smem_bytes = 0;
#define FA_FWD_PAGED_KERNEL(family, type, hdim)                                                \
  if (plan->kernel == FwdKernel::kNone && (limits.sm90a || !family::kFwdNeedsSm90a) &&         \
      p.dtype == element_type_of<type>() && p.head_dim == hdim &&                              \
      family::forward_paged_accepts(p)) {                                                      \
    plan->kernel = family::kFwdKernel;                                                         \
    plan->block_m = family::forward_paged_block_m<hdim>();                                     \
    smem_bytes = family::forward_paged_smem_bytes<type, hdim>();                               \
  }
#include "cuda/instantiations/fwd_paged_list.inc"
#undef FA_FWD_PAGED_KERNEL
  if (plan->kernel == FwdKernel::kNone) {
    return Status(StatusCode::kUnsupported,
                  "CUDA KV cache: no paged forward kernel for head dim " +
                      std::to_string(p.head_dim));
  }
  plan->head_dim = p.head_dim;
  return check_kernel_fits("CUDA KV cache", device, plan->head_dim, smem_bytes);
}

Status forward_paged(const core::KVCacheParams& p, FwdKernel kernel, cudaStream_t stream) {
#define FA_FWD_PAGED_KERNEL(family, type, hdim)                                                \
  if (kernel == family::kFwdKernel && p.dtype == element_type_of<type>() &&                    \
      p.head_dim == hdim) {                                                                    \
    return family::run_forward_paged<type, hdim>(p, stream);                                   \
  }
#include "cuda/instantiations/fwd_paged_list.inc"
#undef FA_FWD_PAGED_KERNEL
  return Status(StatusCode::kInternal,
                "CUDA KV cache: no paged forward kernel for head dim " +
                    std::to_string(p.head_dim));
}

}  // namespace flashattn::cuda
