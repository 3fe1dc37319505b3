// The CUDA backward: what it runs (one plan shared by check_backward, and so supported(), the
// workspace query and the run), its workspace, and the three launches: preprocess
// (D = dot(dO, O), lse in log2 units, dQ accumulator zeroed), the main kernel of the head dim
// (sm90/bwd_kernel.cuh where the device runs sm_90a code and the head dim has one, else
// sm80/bwd_kernel.cuh), dQ conversion; through the padding path (backward_pad.hpp) for head
// dims without a kernel and views the kernel cannot read in place.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/backward_pad.hpp"
#include "cuda/backward_tuning.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/bwd_deterministic_plan.hpp"
#include "cuda/check.hpp"
#include "cuda/device_limits.hpp"
#include "cuda/operand_traits.hpp"
#include "cuda/sm80/bwd_launch.hpp"
#include "cuda/common/bwd_prepost.cuh"
#include "cuda/sm90/bwd_launch.hpp"

namespace flashattn::cuda {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported, "CUDA backward: " + what);
}

// The first entry of the list (Hopper families first) for this type and head dim that the
// device can run: `sm90a` says whether it runs sm_90a code (DeviceLimits::sm90a).
int kernel_smem_bytes(core::ElementType dtype, int head_dim, bool sm90a) {
#define FA_BWD_KERNEL(family, type, hdim, dropout)                                  \
  if ((sm90a || !family::kBwdNeedsSm90a) && dtype == element_type_of<type>() &&     \
      head_dim == hdim) {                                                           \
    return family::backward_smem_bytes<type, hdim>();                               \
  }
#include "cuda/instantiations/bwd_list.inc"
#undef FA_BWD_KERNEL
  return 0;
}

Status run_kernel(const core::BackwardParams& p, const BwdWorkspace& w, bool sm90a,
                  cudaStream_t stream) {
#define FA_BWD_KERNEL(family, type, hdim, dropout)                                  \
  if ((sm90a || !family::kBwdNeedsSm90a) && p.dtype == element_type_of<type>() &&   \
      p.head_dim == hdim && p.has_dropout() == dropout) {                           \
    return family::run_backward<type, hdim, dropout>(p, w, stream);                 \
  }
#include "cuda/instantiations/bwd_list.inc"
#undef FA_BWD_KERNEL
  return Status(StatusCode::kInternal,
                "CUDA backward: no kernel for head dim " + std::to_string(p.head_dim));
}

struct BwdPlan {
  int head_dim = 0;     // the compiled head dim that runs (>= params.head_dim)
  bool padded = false;  // through padded copies in the workspace
};

// The device-independent part of the decision.
Status plan_of(const core::BackwardParams& p, BwdPlan* plan) {
  if (p.dtype != core::ElementType::kF16 && p.dtype != core::ElementType::kBF16) {
    return unsupported("dtype: expected fp16 or bf16, got fp32 (use Backend::kCpu for fp32)");
  }
  if (p.head_dim_v != p.head_dim) {
    return unsupported("v: expected head dim d_v equal to d=" + std::to_string(p.head_dim) +
                       ", got " + std::to_string(p.head_dim_v));
  }
  plan->head_dim = bwd_kernel_head_dim(p.head_dim);
  if (plan->head_dim == 0) {
    return unsupported("q: expected head dim in [1, " + std::to_string(kBwdMaxHeadDim) +
                       "], got " + std::to_string(p.head_dim) +
                       " (larger head dims are not implemented in the CUDA backward yet; use "
                       "Backend::kCpu)");
  }
  if (p.nheads_k > 65535 || p.batch > 65535) {
    return unsupported("q: expected batch <= 65535 and nheads_k <= 65535, got batch=" +
                       std::to_string(p.batch) + " nheads_k=" + std::to_string(p.nheads_k));
  }
  const bool varlen = p.is_varlen();
  const auto in_place = [&](const core::Operand& op) { return aligned_for_kernels(op, varlen); };
  plan->padded = plan->head_dim != p.head_dim || !in_place(p.q) || !in_place(p.k) ||
                 !in_place(p.v) || !in_place(p.dout);
  return Status::Ok();
}

// The params of the problem the main kernel runs (head dim plan.head_dim), for sizing.
core::BackwardParams kernel_shape(const core::BackwardParams& p, const BwdPlan& plan) {
  core::BackwardParams k = p;
  k.head_dim = k.head_dim_v = plan.head_dim;
  return k;
}

unsigned grid_for(int64_t items, int per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <class T>
Status run_typed(const core::BackwardParams& p, const BwdWorkspace& w, bool sm90a,
                 cudaStream_t stream) {
  const RowMap rows{p.is_varlen() ? 0 : p.seqlen_q};
  const int64_t pairs = static_cast<int64_t>(p.total_q) * p.nheads;
  const bool vector = bwd_prepost_vector_ok(p, w);
  if (pairs > 0) {
    const int lanes = bwd_preprocess_lanes(p, vector);
    const unsigned grid = grid_for(pairs, 256 / lanes);
    if (vector) {
      bwd_preprocess<T, true><<<grid, 256, 0, stream>>>(p, rows, w, lanes);
    } else {
      bwd_preprocess<T, false><<<grid, 256, 0, stream>>>(p, rows, w, lanes);
    }
    FA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (w.turns_bytes > 0) {
    FA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(w.turns, 0, w.turns_bytes, stream));
  }
  const Status ran = run_kernel(p, w, sm90a, stream);
  if (!ran.ok()) return ran;
  if (w.kv_splits > 1) {
    const RowMap kv_rows{p.is_varlen() ? 0 : p.seqlen_k};
    bwd_combine_dkv<T><<<grid_for(w.kv_stride, 256), 256, 0, stream>>>(p, kv_rows, w);
    FA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (pairs > 0) {
    const int64_t elements = pairs * p.head_dim;
    if (vector) {
      bwd_convert_dq<T, true><<<grid_for(elements / 8, 256), 256, 0, stream>>>(p, rows, w);
    } else {
      bwd_convert_dq<T, false><<<grid_for(elements, 256), 256, 0, stream>>>(p, rows, w);
    }
    FA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return Status::Ok();
}

// The plan and its check against `device`, whose limits it also returns.
Status check_on_device(const core::BackwardParams& p, int device, BwdPlan* plan,
                       DeviceLimits* limits) {
  const Status planned = plan_of(p, plan);
  if (!planned.ok()) return planned;
  const Status queried = device_limits(device, limits);
  if (!queried.ok()) return queried;
  return check_kernel_fits("CUDA backward", device, plan->head_dim,
                           kernel_smem_bytes(p.dtype, plan->head_dim, limits->sm90a));
}

// The workspace is used from its first 256-byte boundary on (the kernels' vector loads and
// atomics need aligned buffers; the caller's pointer may be anywhere), hence the slack.
constexpr size_t kWorkspaceAlignment = 256;

// GQA split among the sm90 kernel's blocks (bwd_sm90_kv_splits) on a device with `limits`.
int kv_splits(const core::BackwardParams& k, const DeviceLimits& limits) {
  if (!limits.sm90a || !bwd_sm90_has(k.head_dim) || k.nheads_k <= 0) return 1;
  const int block_n = bwd_sm90_tile(k.head_dim).block_n;
  const int64_t blocks = static_cast<int64_t>((k.seqlen_k + block_n - 1) / block_n) *
                         k.nheads_k * k.batch;
  return bwd_sm90_kv_splits(blocks, k.nheads / k.nheads_k, limits.sms, k.deterministic);
}

size_t workspace_bytes(const core::BackwardParams& p, const BwdPlan& plan,
                       const DeviceLimits& limits) {
  const core::BackwardParams k = kernel_shape(p, plan);
  const size_t kernel_bytes = bwd_workspace_layout(k, bwd_workspace_block_m(plan.head_dim),
                                                   bwd_sm90_dq_slices(k, plan.head_dim),
                                                   kv_splits(k, limits))
                                  .total;
  return kWorkspaceAlignment + kernel_bytes +
         (plan.padded ? bwd_padded_bytes(p, plan.head_dim) : 0);
}

}  // namespace

Status check_backward(const core::BackwardParams& p, int device) {
  BwdPlan plan;
  DeviceLimits limits;
  return check_on_device(p, device, &plan, &limits);
}

size_t backward_workspace_size(const core::BackwardParams& p) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  BwdPlan plan;
  DeviceLimits limits;
  return check_on_device(p, device, &plan, &limits).ok() ? workspace_bytes(p, plan, limits) : 0;
}

Status backward(const core::BackwardParams& p, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  BwdPlan plan;
  DeviceLimits limits;
  const Status checked = check_on_device(p, device, &plan, &limits);
  if (!checked.ok()) return checked;
  const size_t needed = workspace_bytes(p, plan, limits);
  if (p.workspace == nullptr || p.workspace_bytes < needed) {
    return Status(StatusCode::kInvalidArgument,
                  "launch.workspace: expected at least " + std::to_string(needed) +
                      " bytes for the CUDA backward, got " + std::to_string(p.workspace_bytes));
  }
  core::BackwardParams aligned = p;
  const auto address = reinterpret_cast<uintptr_t>(p.workspace);
  const size_t shift = (kWorkspaceAlignment - address % kWorkspaceAlignment) % kWorkspaceAlignment;
  aligned.workspace = static_cast<char*>(p.workspace) + shift;
  aligned.workspace_bytes = p.workspace_bytes - shift;
  auto run = [&](const core::BackwardParams& q) {
    // The accumulator slices are the sm90 kernel's; the sm80 kernel adds into slice 0.
    const int slices = bwd_sm90_dq_slices(q, q.head_dim);
    BwdWorkspace w = bwd_workspace(q, bwd_workspace_block_m(q.head_dim), slices,
                                   limits.sm90a ? slices : 1, kv_splits(q, limits));
    w.turn_group_blocks = bwd_turn_group_blocks(q, q.head_dim);
    w.rotated = limits.sm90a && bwd_sm90_rotates(q, q.head_dim, limits.sms);
    return q.dtype == core::ElementType::kF16
               ? run_typed<__half>(q, w, limits.sm90a, stream)
               : run_typed<__nv_bfloat16>(q, w, limits.sm90a, stream);
  };
  if (!plan.padded) return run(aligned);
  core::BackwardParams padded;
  Status s = bwd_pad_inputs(aligned, plan.head_dim, stream, &padded);
  if (!s.ok()) return s;
  s = run(padded);
  if (!s.ok()) return s;
  return bwd_unpad_gradients(p, padded, stream);
}

}  // namespace flashattn::cuda
