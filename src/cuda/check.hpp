// Turning CUDA runtime errors into Status values.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError,
                std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace flashattn::cuda

#define FA_CUDA_RETURN_IF_ERROR(expr)                                       \
  do {                                                                      \
    const ::flashattn::Status fa_status_ = ::flashattn::cuda::cuda_status((expr), #expr); \
    if (!fa_status_.ok()) return fa_status_;                                \
  } while (0)
