// Device discovery and pointer queries for the CUDA backend.
#include <cuda_runtime.h>

#include "cuda/backend.hpp"
#include "cuda/check.hpp"

namespace flashattn::cuda {

bool available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

Status pointer_device(const void* ptr, Device* device) {
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    *device = Device{DeviceType::kCPU, 0};
    return Status::Ok();
  }
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
    *device = Device{DeviceType::kCUDA, attributes.device};
  } else {
    *device = Device{DeviceType::kCPU, 0};
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
