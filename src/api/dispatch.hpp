// The one decision of what runs (docs/design.md: one kernel choice). make_plan resolves
// Backend::kAuto, validates, and asks the chosen backend whether it can run the call;
// supported() returns exactly its status and the entry points run exactly its plan, so
// "is this supported?" never disagrees with what runs.
#pragma once

#include <cstddef>

#include "api/validate.hpp"
#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::api {

template <class Params>
struct Plan {
  Target target;               // backend resolved (never kAuto) and its device
  Params params;               // filled by validation
  size_t workspace_bytes = 0;  // what Launch::workspace must hold
};

// `devices_trusted`: Launch::devices_trusted (the pointers' devices are not asked of the
// CUDA runtime); false for the queries, which have no Launch.
Status make_plan(const ForwardArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::AttentionParams>* plan);
Status make_plan(const BackwardArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::BackwardParams>* plan);
Status make_plan(const KVCacheArgs& args, Backend requested, bool devices_trusted,
                 Plan<core::KVCacheParams>* plan);

template <class Args>
struct PlanOf;
template <>
struct PlanOf<ForwardArgs> {
  using type = Plan<core::AttentionParams>;
};
template <>
struct PlanOf<BackwardArgs> {
  using type = Plan<core::BackwardParams>;
};
template <>
struct PlanOf<KVCacheArgs> {
  using type = Plan<core::KVCacheParams>;
};
template <class Args>
using PlanFor = typename PlanOf<Args>::type;

// Launch::workspace holds at least `required` bytes on the target's device.
Status check_workspace(const Target& target, size_t required, const Launch& launch);

// Runs a plan made by make_plan (the workspace already checked).
Status run(Plan<core::AttentionParams>& plan, const Launch& launch);
Status run(Plan<core::BackwardParams>& plan, const Launch& launch);
Status run(Plan<core::KVCacheParams>& plan, const Launch& launch);

// Built with CUDA and a GPU visible; asked once per process.
bool cuda_usable();

}  // namespace flashattn::api
