// Validation: every argument of a call is checked against docs/contract.md ("Errors") before
// anything runs, and the torch-free Params the backends read are filled from it. Nothing
// here writes to a caller's buffer, so a rejected call leaves every output untouched.
//
// Codes: kInvalidArgument for a call that violates docs/contract.md; kUnsupported for a valid call
// the chosen backend cannot run (fp32 on CUDA, d_v != d for now).
#pragma once

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::api {

// Where a call runs, as resolved by the dispatch (never Backend::kAuto).
struct Target {
  Backend backend = Backend::kCpu;
  Device device{};  // the device every tensor must live on
  // Ask the CUDA runtime where each pointer really lives (only when CUDA is usable and the
  // caller does not vouch for the devices: Launch::devices_trusted).
  bool verify_pointers = false;
};

Status validate_forward(const ForwardArgs& args, const Target& target,
                        core::AttentionParams* params);
Status validate_backward(const BackwardArgs& args, const Target& target,
                         core::BackwardParams* params);
Status validate_kvcache(const KVCacheArgs& args, const Target& target, core::KVCacheParams* params);

}  // namespace flashattn::api
