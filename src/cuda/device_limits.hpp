// What the planners need to know of a device, and the one check every kernel family makes
// against it (compute capability, shared memory per block).
#pragma once

#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

struct DeviceLimits {
  int major = 0;
  int minor = 0;
  int sms = 0;
  int smem_per_block_optin = 0;
  int smem_per_sm = 0;
  // The device runs this build's sm_90a code (compute capability 9.0 and 90a among the build's
  // architectures), so the Hopper kernels may run; false when FLASHATTN_DISABLE_SM90 is set
  // to a non-empty value other than 0 (to run and compare the sm80 kernels on a Hopper GPU;
  // read once per device and process, at its first call).
  bool sm90a = false;
};

// Queried from the runtime once per device and process: the planners run on every call.
Status device_limits(int device, DeviceLimits* limits);

// kUnsupported, prefixed with `who`, unless `device` is sm_80 or newer and a block of
// `smem_bytes` fits it; smem_bytes 0 means no kernel is compiled for `head_dim`.
Status check_kernel_fits(const std::string& who, int device, int head_dim, int smem_bytes,
                         DeviceLimits* limits = nullptr);

}  // namespace flashattn::cuda
