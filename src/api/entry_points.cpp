// The public entry points: resolve the backend, validate, check the workspace, run.
// Everything they decide lives in dispatch.cpp; they only put it in order and keep
// exceptions (an allocation failure while formatting a message) inside the library.
#include <exception>

#include "api/checks.hpp"
#include "api/dispatch.hpp"

namespace flashattn {
namespace {

template <class Call>
Status guarded(Call call) {
  try {
    return call();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal,
                  std::string("flashattn: unexpected exception: ") + e.what());
  } catch (...) {
    return Status(StatusCode::kInternal, "flashattn: unexpected exception");
  }
}

// `launch`, with a workspace from its allocator when it has one and the call needs more
// than it holds (check_workspace then judges what the allocator gave).
Launch with_workspace(const Launch& launch, size_t required) {
  if (required <= launch.workspace_bytes || launch.allocate_workspace == nullptr) return launch;
  Launch sized = launch;
  sized.workspace = launch.allocate_workspace(required, launch.allocator_context);
  sized.workspace_bytes = sized.workspace != nullptr ? required : 0;
  return sized;
}

template <class Args>
Status execute(const Args& args, const Launch& launch) {
  return guarded([&] {
    api::PlanFor<Args> plan;
    FA_RETURN_IF_ERROR(api::make_plan(args, launch.backend, launch.devices_trusted, &plan));
    const Launch sized = with_workspace(launch, plan.workspace_bytes);
    FA_RETURN_IF_ERROR(api::check_workspace(plan.target, plan.workspace_bytes, sized));
    return api::run(plan, sized);
  });
}

template <class Args>
Status query_workspace(const Args& args, Backend backend, size_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) return api::invalid("bytes", "a non-null pointer", "nullptr");
    api::PlanFor<Args> plan;
    FA_RETURN_IF_ERROR(api::make_plan(args, backend, /*devices_trusted=*/false, &plan));
    *bytes = plan.workspace_bytes;
    return Status::Ok();
  });
}

template <class Args>
Status query_supported(const Args& args, Backend backend) {
  return guarded([&] {
    api::PlanFor<Args> plan;
    return api::make_plan(args, backend, /*devices_trusted=*/false, &plan);
  });
}

}  // namespace

Status forward(const ForwardArgs& args, const Launch& launch) { return execute(args, launch); }
Status backward(const BackwardArgs& args, const Launch& launch) { return execute(args, launch); }
Status forward_kvcache(const KVCacheArgs& args, const Launch& launch) {
  return execute(args, launch);
}

Status workspace_size(const ForwardArgs& args, Backend backend, size_t* bytes) {
  return query_workspace(args, backend, bytes);
}
Status workspace_size(const BackwardArgs& args, Backend backend, size_t* bytes) {
  return query_workspace(args, backend, bytes);
}
Status workspace_size(const KVCacheArgs& args, Backend backend, size_t* bytes) {
  return query_workspace(args, backend, bytes);
}

Status supported(const ForwardArgs& args, Backend backend) {
  return query_supported(args, backend);
}
Status supported(const BackwardArgs& args, Backend backend) {
  return query_supported(args, backend);
}
Status supported(const KVCacheArgs& args, Backend backend) {
  return query_supported(args, backend);
}

bool cuda_available() { return api::cuda_usable(); }

}  // namespace flashattn
