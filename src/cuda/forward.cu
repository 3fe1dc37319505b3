// The CUDA forward: kernel choice (shared by check_forward, the workspace query and the run),
// dispatch to the generated instantiations, and the padding path.
//
// The kernel is the first entry of instantiations/fwd_list.inc (the Hopper family first) for
// the call's dtype, compiled head dim and dropout whose family the device runs and which
// accepts the call's layout, as in the backward (backward.cu). Both families have dropout
// instantiations, so a call with dropout runs where the same call without it would (the
// Hopper kernel then does not pack GQA: sm90/fwd_launch.cuh); a paged KV cache has no
// dropout (the API refuses it). e4m3 (FP8) calls have one family, the Hopper kernel's FP8
// shape (instantiations/fwd_fp8_list.inc), which reads its operands in place: there is no
// padded path for them, and no dropout (the API refuses it).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/check.hpp"
#include "cuda/device_limits.hpp"
#include "cuda/operand_traits.hpp"
#include "cuda/forward_pad.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda/forward_tuning.hpp"
#include "cuda/kvcache_tuning.hpp"
#include "cuda/sm80/fwd_launch.hpp"
#include "cuda/sm90/fwd_launch.hpp"

namespace flashattn::cuda {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported, "CUDA forward: " + what);
}

// The dense call as a KV-cache call that reads k and v whole (decode_route).
core::KVCacheParams as_full_cache(const core::AttentionParams& p) {
  core::KVCacheParams kv;
  static_cast<core::AttentionParams&>(kv) = p;
  kv.num_splits = 0;  // the plan picks, as for flash_attn_with_kvcache
  return kv;
}

struct Chosen {
  FwdKernel kernel = FwdKernel::kNone;
  int smem_bytes = 0;
  int block_m = 0;
};

// `as_run` are the params the kernel sees: the caller's, or their padded copy.
Chosen first_kernel(const core::AttentionParams& as_run, bool sm90a) {
#define FA_FWD_KERNEL(family, type, hdim, dropout)                                          \
  if ((sm90a || !family::kFwdNeedsSm90a) && as_run.dtype == element_type_of<type>() &&      \
      as_run.head_dim == hdim && as_run.has_dropout() == dropout &&                         \
      family::forward_accepts(as_run)) {                                                    \
    return {family::kFwdKernel, family::forward_smem_bytes<type, hdim>(),                   \
            family::forward_block_m<hdim>()};                                               \
  }
#include "cuda/instantiations/fwd_list.inc"
#undef FA_FWD_KERNEL
  return {};
}

Status run_kernel(const core::AttentionParams& p, FwdKernel kernel, cudaStream_t stream) {
#define FA_FWD_FP8_KERNEL(family, type, hdim)                                               \
  if (kernel == family::kFwdFp8Kernel && p.dtype == element_type_of<type>() &&              \
      p.head_dim == hdim) {                                                                 \
    return family::run_forward_fp8<type, hdim>(p, stream);                                  \
  }
#include "cuda/instantiations/fwd_fp8_list.inc"
#undef FA_FWD_FP8_KERNEL
#define FA_FWD_KERNEL(family, type, hdim, dropout)                                          \
  if (kernel == family::kFwdKernel && p.dtype == element_type_of<type>() &&                 \
      p.head_dim == hdim && p.has_dropout() == dropout) {                                   \
    return family::run_forward<type, hdim, dropout>(p, stream);                             \
  }
#include "cuda/instantiations/fwd_list.inc"
#undef FA_FWD_KERNEL
  return Status(StatusCode::kInternal, "CUDA forward: no kernel for head dim " +
                                           std::to_string(p.head_dim));
}

// Decoding through the plain forward (Transformers' generate() calls flash_attn_func with one
// query per sequence and the whole cache as k and v): a few query rows per KV head, which the
// forward kernels run as one tile per (KV) head without splitting the keys, most of the GPU
// idle. The KV-cache kernel's decode tile packs the query heads of a KV head and splits the
// keys over the GPU; the call is flash_attn_with_kvcache's over a full cache of seqlen_k keys
// (no cache_seqlens, nothing appended). Dense calls only, without dropout or seqused_k, that
// the KV-cache plan runs in place.
bool decode_route(const core::AttentionParams& p, int device, FwdPlan* plan) {
  if (p.is_varlen() || p.seqused_k != nullptr || p.has_dropout() || p.batch < 1 ||
      p.seqlen_q < 1 || p.seqlen_k < 1 || p.nheads_k < 1 || p.nheads % p.nheads_k != 0 ||
      static_cast<int64_t>(p.seqlen_q) * (p.nheads / p.nheads_k) > kKvDecodeMaxRows) {
    return false;
  }
  uint64_t workspace = 0;
  if (!kvcache_decodes_in_place(as_full_cache(p), device, &workspace)) return false;
  plan->kernel = FwdKernel::kKvDecode;
  plan->head_dim = kv_kernel_head_dim(p.head_dim);
  plan->block_m = kv_decode_tile(plan->head_dim).block_m;
  plan->workspace_bytes = workspace;
  return true;
}

// The FP8 plan: the Hopper kernel for the compiled head dims, operands read in place.
Status choose_fp8_kernel(const core::AttentionParams& p, int device, FwdPlan* plan) {
  if (!p.q_e4m3 || !p.kv_e4m3) {
    return unsupported("q: expected q, k and v all e4m3 for the FP8 forward");
  }
  if (p.head_dim_v != p.head_dim) {
    return unsupported("v: expected head dim d_v equal to d=" + std::to_string(p.head_dim) +
                       ", got " + std::to_string(p.head_dim_v));
  }
  int smem_bytes = 0;
#define FA_FWD_FP8_KERNEL(family, type, hdim)                                    \
  if (p.dtype == element_type_of<type>() && p.head_dim == hdim) {                \
    smem_bytes = family::forward_fp8_smem_bytes<type, hdim>();                   \
  }
#include "cuda/instantiations/fwd_fp8_list.inc"
#undef FA_FWD_FP8_KERNEL
  if (smem_bytes == 0) {
    return unsupported("q: e4m3 (FP8) head dim: expected 64, 128 or 256, got " +
                       std::to_string(p.head_dim));
  }
  DeviceLimits limits;
  const Status fits = check_kernel_fits("CUDA forward", device, p.head_dim, smem_bytes, &limits);
  if (!fits.ok()) return fits;
  if (!limits.sm90a) {
    return unsupported("q: e4m3 (FP8) runs on Hopper GPUs (sm_90a code) only, device " +
                       std::to_string(device) + " is " + std::to_string(limits.major) + "." +
                       std::to_string(limits.minor));
  }
  std::string why;
  if (!sm90::forward_fp8_accepts(p, &why)) return unsupported(why);
  plan->kernel = sm90::kFwdFp8Kernel;
  plan->head_dim = p.head_dim;
  plan->block_m = p.head_dim == 64    ? sm90::forward_fp8_block_m<64>()
                  : p.head_dim == 128 ? sm90::forward_fp8_block_m<128>()
                                      : sm90::forward_fp8_block_m<256>();
  return Status::Ok();
}

// The layout of the padded copy (pad_inputs): contiguous, so every family accepts it.
core::AttentionParams padded_shape(const core::AttentionParams& p, int head_dim) {
  core::AttentionParams k = p;
  k.head_dim = k.head_dim_v = head_dim;
  k.q = contiguous(nullptr, p, p.nheads, p.seqlen_q, head_dim);
  k.k = contiguous(nullptr, p, p.nheads_k, p.seqlen_k, head_dim);
  k.v = contiguous(nullptr, p, p.nheads_k, p.seqlen_k, head_dim);
  k.out = contiguous(nullptr, p, p.nheads, p.seqlen_q, head_dim);
  return k;
}

}  // namespace

FwdKernel first_forward_family(const core::AttentionParams& as_run, bool sm90a) {
  return first_kernel(as_run, sm90a).kernel;
}

Status choose_kernel(const core::AttentionParams& p, int device, FwdPlan* plan) {
  *plan = FwdPlan{};
  if (p.dtype != core::ElementType::kF16 && p.dtype != core::ElementType::kBF16) {
    return unsupported("dtype: expected fp16 or bf16, got fp32 (use Backend::kCpu for fp32)");
  }
  if (p.has_fp8()) return choose_fp8_kernel(p, device, plan);
  if (p.head_dim_v != p.head_dim) {
    return unsupported("v: expected head dim d_v equal to d=" + std::to_string(p.head_dim) +
                       ", got " + std::to_string(p.head_dim_v));
  }
  if (p.head_dim < 1 || p.head_dim > kFwdMaxHeadDim) {
    return unsupported("q: expected head dim in [1, 256], got " + std::to_string(p.head_dim));
  }
  if (p.nheads > 65535 || p.batch > 65535) {
    return unsupported("q: expected batch and nheads <= 65535, got batch=" +
                       std::to_string(p.batch) + " nheads=" + std::to_string(p.nheads));
  }
  if (decode_route(p, device, plan)) return Status::Ok();
  plan->head_dim = fwd_kernel_head_dim(p.head_dim);
  const bool varlen = p.is_varlen();
  const auto in_place = [&](const core::Operand& op) { return aligned_for_kernels(op, varlen); };
  plan->padded = plan->head_dim != p.head_dim || !in_place(p.q) || !in_place(p.k) ||
                 !in_place(p.v) || !in_place(p.out);
  DeviceLimits limits;
  const Status queried = device_limits(device, &limits);
  if (!queried.ok()) return queried;
  const Chosen chosen =
      first_kernel(plan->padded ? padded_shape(p, plan->head_dim) : p, limits.sm90a);
  const Status fits =
      check_kernel_fits("CUDA forward", device, plan->head_dim, chosen.smem_bytes);
  if (!fits.ok()) return fits;
  plan->kernel = chosen.kernel;
  plan->block_m = chosen.block_m;
  return Status::Ok();
}

Status check_forward(const core::AttentionParams& params, int device) {
  FwdPlan plan;
  return choose_kernel(params, device, &plan);
}

size_t forward_workspace_size(const core::AttentionParams& params) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  FwdPlan plan;
  if (!choose_kernel(params, device, &plan).ok()) return 0;
  if (plan.kernel == FwdKernel::kKvDecode) return plan.workspace_bytes;
  if (!plan.padded) return 0;
  return padded_workspace_bytes(params, plan.head_dim);
}

Status forward(const core::AttentionParams& params, void* workspace, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FwdPlan plan;
  const Status chosen = choose_kernel(params, device, &plan);
  if (!chosen.ok()) return chosen;
  if (plan.kernel == FwdKernel::kKvDecode) {
    if (plan.workspace_bytes > 0 && workspace == nullptr) {
      return Status(StatusCode::kInvalidArgument,
                    "launch.workspace: expected " + std::to_string(plan.workspace_bytes) +
                        " bytes for the split keys of a decoding call, got nullptr");
    }
    return kvcache_decode(as_full_cache(params), workspace, stream);
  }
  if (!plan.padded) return run_kernel(params, plan.kernel, stream);
  if (workspace == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "launch.workspace: expected " +
                      std::to_string(padded_workspace_bytes(params, plan.head_dim)) +
                      " bytes for the padded head dim " + std::to_string(plan.head_dim) +
                      ", got nullptr");
  }
  core::AttentionParams padded;
  const Status copied = pad_inputs(params, plan.head_dim, workspace, stream, &padded);
  if (!copied.ok()) return copied;
  const Status ran = run_kernel(padded, plan.kernel, stream);
  if (!ran.ok()) return ran;
  return unpad_output(params, padded, stream);
}

}  // namespace flashattn::cuda
