// The CUDA forward: kernel choice (shared by check_forward, the workspace query and the run),
// dispatch to the generated instantiations, and the padding path.
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
#include "cuda/sm80/fwd_launch.hpp"

namespace flashattn::cuda {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported, "CUDA forward: " + what);
}

// Dynamic shared memory of the compiled kernel for (dtype, head dim); 0 if none.
int kernel_smem_bytes(core::ElementType dtype, int head_dim) {
#define FA_FWD_KERNEL(family, type, hdim, dropout)                          \
  if (dtype == element_type_of<type>() && head_dim == hdim) {               \
    return family::forward_smem_bytes<type, hdim>();                        \
  }
#include "cuda/instantiations/fwd_list.inc"
#undef FA_FWD_KERNEL
  return 0;
}

Status run_kernel(const core::AttentionParams& p, cudaStream_t stream) {
#define FA_FWD_KERNEL(family, type, hdim, dropout)                          \
  if (p.dtype == element_type_of<type>() && p.head_dim == hdim &&           \
      p.has_dropout() == dropout) {                                         \
    return family::run_forward<type, hdim, dropout>(p, stream);             \
  }
#include "cuda/instantiations/fwd_list.inc"
#undef FA_FWD_KERNEL
  return Status(StatusCode::kInternal, "CUDA forward: no kernel for head dim " +
                                           std::to_string(p.head_dim));
}

}  // namespace

Status choose_kernel(const core::AttentionParams& p, int device, FwdPlan* plan) {
  *plan = FwdPlan{};
  if (p.dtype != core::ElementType::kF16 && p.dtype != core::ElementType::kBF16) {
    return unsupported("dtype: expected fp16 or bf16, got fp32 (use Backend::kCpu for fp32)");
  }
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
  plan->head_dim = fwd_kernel_head_dim(p.head_dim);
  const Status fits = check_kernel_fits("CUDA forward", device, plan->head_dim,
                                        kernel_smem_bytes(p.dtype, plan->head_dim));
  if (!fits.ok()) return fits;
  const bool varlen = p.is_varlen();
  const auto in_place = [&](const core::Operand& op) { return aligned_for_kernels(op, varlen); };
  plan->padded = plan->head_dim != p.head_dim || !in_place(p.q) || !in_place(p.k) ||
                 !in_place(p.v) || !in_place(p.out);
  plan->kernel = FwdKernel::kSm80;
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
  if (!choose_kernel(params, device, &plan).ok() || !plan.padded) return 0;
  return padded_workspace_bytes(params, plan.head_dim);
}

Status forward(const core::AttentionParams& params, void* workspace, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  FwdPlan plan;
  const Status chosen = choose_kernel(params, device, &plan);
  if (!chosen.ok()) return chosen;
  if (!plan.padded) return run_kernel(params, stream);
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
  const Status ran = run_kernel(padded, stream);
  if (!ran.ok()) return ran;
  return unpad_output(params, padded, stream);
}

}  // namespace flashattn::cuda
