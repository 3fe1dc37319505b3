#include "api/dispatch.hpp"

#include "api/checks.hpp"
#include "cpu/backend.hpp"
#include "cpu/reference.hpp"
#include "cuda/backend.hpp"

namespace flashattn::api {
namespace {

// What differs between the three calls; make_plan is written once over it.
struct ForwardKind {
  static Status validate(const ForwardArgs& a, const Target& t, core::AttentionParams* p) {
    return validate_forward(a, t, p);
  }
  static Status cuda_check(const core::AttentionParams& p, int device) {
    return cuda::check_forward(p, device);
  }
  static size_t cuda_workspace(const core::AttentionParams& p) {
    return cuda::forward_workspace_size(p);
  }
};
struct BackwardKind {
  static Status validate(const BackwardArgs& a, const Target& t, core::BackwardParams* p) {
    return validate_backward(a, t, p);
  }
  static Status cuda_check(const core::BackwardParams& p, int device) {
    return cuda::check_backward(p, device);
  }
  static size_t cuda_workspace(const core::BackwardParams& p) {
    return cuda::backward_workspace_size(p);
  }
};
struct KVCacheKind {
  static Status validate(const KVCacheArgs& a, const Target& t, core::KVCacheParams* p) {
    return validate_kvcache(a, t, p);
  }
  static Status cuda_check(const core::KVCacheParams& p, int device) {
    return cuda::check_kvcache(p, device);
  }
  static size_t cuda_workspace(const core::KVCacheParams& p) {
    return cuda::kvcache_workspace_size(p);
  }
};

// kAuto follows q: CUDA tensors run on CUDA, host tensors on the CPU backend.
Status resolve_target(Backend requested, const Tensor& q, bool devices_trusted, Target* target) {
  switch (requested) {
    case Backend::kAuto:
      target->backend = q.device.type == DeviceType::kCUDA ? Backend::kCuda : Backend::kCpu;
      break;
    case Backend::kReference:
    case Backend::kCpu:
    case Backend::kCuda:
      target->backend = requested;
      break;
    default:
      return invalid("launch.backend", "auto, reference, cpu or cuda",
                     std::to_string(static_cast<int>(requested)));
  }
  if (target->backend == Backend::kCuda) {
    const int index = q.device.type == DeviceType::kCUDA ? q.device.index : 0;
    if (index < 0) return invalid("q", "a CUDA device index >= 0", std::to_string(index));
    target->device = Device{DeviceType::kCUDA, index};
  } else {
    target->device = Device{DeviceType::kCPU, 0};
  }
  target->verify_pointers = !devices_trusted && cuda_usable();
  return Status::Ok();
}

Status cuda_unavailable() {
#if defined(FLASHATTN_WITH_CUDA)
  return unsupported("backend cuda", "no CUDA device is visible to this process");
#else
  return unsupported(
      "backend cuda",
      "this flashattn build has no CUDA backend (configured with FLASHATTN_CUDA=OFF)");
#endif
}

template <class Kind, class Args, class Params>
Status make_plan_of(const Args& args, Backend requested, bool devices_trusted,
                    Plan<Params>* plan) {
  FA_RETURN_IF_ERROR(resolve_target(requested, args.q, devices_trusted, &plan->target));
  FA_RETURN_IF_ERROR(Kind::validate(args, plan->target, &plan->params));
  plan->workspace_bytes = 0;
  if (plan->target.backend != Backend::kCuda) return Status::Ok();
  if (!cuda_usable()) return cuda_unavailable();
  FA_RETURN_IF_ERROR(Kind::cuda_check(plan->params, plan->target.device.index));
  plan->workspace_bytes = Kind::cuda_workspace(plan->params);
  return Status::Ok();
}

}  // namespace

bool cuda_usable() {
  static const bool usable = cuda::available();
  return usable;
}

Status make_plan(const ForwardArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::AttentionParams>* plan) {
  return make_plan_of<ForwardKind>(args, requested, devices_trusted, plan);
}
Status make_plan(const BackwardArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::BackwardParams>* plan) {
  return make_plan_of<BackwardKind>(args, requested, devices_trusted, plan);
}
Status make_plan(const KVCacheArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::KVCacheParams>* plan) {
  return make_plan_of<KVCacheKind>(args, requested, devices_trusted, plan);
}

Status check_workspace(const Target& target, size_t required, const Launch& launch) {
  if (required == 0) return Status::Ok();
  const auto expected = [&] {
    return "at least " + std::to_string(required) + " bytes on " + to_text(target.device);
  };
  if (launch.workspace == nullptr) return invalid("launch.workspace", expected(), "nullptr");
  if (launch.workspace_bytes < required) {
    return invalid("launch.workspace_bytes", expected(), std::to_string(launch.workspace_bytes));
  }
  if (target.verify_pointers) {
    Device actual{};
    FA_RETURN_IF_ERROR(cuda::pointer_device(launch.workspace, &actual));
    if (actual.type != target.device.type || actual.index != target.device.index) {
      return invalid("launch.workspace", expected(), "a pointer on " + to_text(actual));
    }
  }
  return Status::Ok();
}

Status run(Plan<core::AttentionParams>& plan, const Launch& launch) {
  switch (plan.target.backend) {
    case Backend::kReference:
      return cpu::reference_forward(plan.params);
    case Backend::kCpu:
      return cpu::forward(plan.params);
    case Backend::kCuda:
      return cuda::forward(plan.params, launch.workspace, launch.stream);
    default:
      return Status(StatusCode::kInternal, "dispatch: forward plan without a backend");
  }
}

Status run(Plan<core::BackwardParams>& plan, const Launch& launch) {
  plan.params.workspace = launch.workspace;
  plan.params.workspace_bytes = launch.workspace_bytes;
  switch (plan.target.backend) {
    case Backend::kReference:
      return cpu::reference_backward(plan.params);
    case Backend::kCpu:
      return cpu::backward(plan.params);
    case Backend::kCuda:
      return cuda::backward(plan.params, launch.stream);
    default:
      return Status(StatusCode::kInternal, "dispatch: backward plan without a backend");
  }
}

Status run(Plan<core::KVCacheParams>& plan, const Launch& launch) {
  plan.params.workspace = launch.workspace;
  plan.params.workspace_bytes = launch.workspace_bytes;
  switch (plan.target.backend) {
    case Backend::kReference:
      return cpu::reference_forward_kvcache(plan.params);
    case Backend::kCpu:
      return cpu::forward_kvcache(plan.params);
    case Backend::kCuda:
      return cuda::forward_kvcache(plan.params, launch.stream);
    default:
      return Status(StatusCode::kInternal, "dispatch: KV-cache plan without a backend");
  }
}

}  // namespace flashattn::api
