#include "cuda/device_limits.hpp"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cuda/check.hpp"

namespace flashattn::cuda {
namespace {

// Compiled like every kernel, for each architecture of the build: the code the runtime picks
// for a device tells which of them it runs. Only the sm_90a pass (the one that compiles the
// wgmma kernels' bodies; a plain sm_90 pass reports binary version 90 too) gives it a static
// shared array, which its attributes show.
constexpr int kSm90aMarkerBytes = 256;

__global__ void architecture_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ volatile int marker[kSm90aMarkerBytes / 4];
  marker[threadIdx.x % (kSm90aMarkerBytes / 4)] = 1;
  if (out != nullptr) *out = marker[0];
#endif
}

bool sm90_disabled_by_environment() {
  const char* value = std::getenv("FLASHATTN_DISABLE_SM90");
  return value != nullptr && value[0] != '\0' && std::strcmp(value, "0") != 0;
}

Status runs_sm90a(int device, const DeviceLimits& l, bool* sm90a) {
  *sm90a = false;
  if (l.major != 9 || l.minor != 0 || sm90_disabled_by_environment()) return Status::Ok();
  int current = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  FA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaFuncAttributes attributes{};
  const cudaError_t got = cudaFuncGetAttributes(&attributes, architecture_probe);
  FA_CUDA_RETURN_IF_ERROR(cudaSetDevice(current));
  FA_CUDA_RETURN_IF_ERROR(got);
  *sm90a = attributes.binaryVersion == 90 &&
           attributes.sharedSizeBytes >= static_cast<size_t>(kSm90aMarkerBytes);
  return Status::Ok();
}

Status query(int device, DeviceLimits* l) {
  const struct {
    int* value;
    cudaDeviceAttr attribute;
  } wanted[] = {
      {&l->major, cudaDevAttrComputeCapabilityMajor},
      {&l->minor, cudaDevAttrComputeCapabilityMinor},
      {&l->sms, cudaDevAttrMultiProcessorCount},
      {&l->smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin},
      {&l->smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor},
  };
  for (const auto& w : wanted) {
    FA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(w.value, w.attribute, device));
  }
  return runs_sm90a(device, *l, &l->sm90a);
}

}  // namespace

Status device_limits(int device, DeviceLimits* limits) {
  static std::mutex mutex;
  static std::unordered_map<int, DeviceLimits> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = known.find(device);
  if (found != known.end()) {
    *limits = found->second;
    return Status::Ok();
  }
  DeviceLimits queried;
  const Status s = query(device, &queried);
  if (!s.ok()) return s;
  known.emplace(device, queried);
  *limits = queried;
  return Status::Ok();
}

Status check_kernel_fits(const std::string& who, int device, int head_dim, int smem_bytes,
                         DeviceLimits* limits_out) {
  DeviceLimits l;
  const Status s = device_limits(device, &l);
  if (!s.ok()) return s;
  if (limits_out != nullptr) *limits_out = l;
  const auto unsupported = [&](const std::string& what) {
    return Status(StatusCode::kUnsupported, who + ": " + what);
  };
  if (l.major < 8) {
    return unsupported("device " + std::to_string(device) +
                       ": expected compute capability >= 8.0, got " + std::to_string(l.major) +
                       "." + std::to_string(l.minor));
  }
  if (smem_bytes == 0) {
    return unsupported("no kernel compiled for head dim " + std::to_string(head_dim));
  }
  if (smem_bytes > l.smem_per_block_optin) {
    return unsupported("head dim " + std::to_string(head_dim) + " needs " +
                       std::to_string(smem_bytes) + " bytes of shared memory per block, device " +
                       std::to_string(device) + " has " + std::to_string(l.smem_per_block_optin));
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
