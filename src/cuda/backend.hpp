// The CUDA backend as the API layer sees it. Built from src/cuda/*.cu when FLASHATTN_CUDA
// is on, and from backend_disabled.cpp otherwise, where every call says the build has no
// CUDA. `check_*` answer "would this run on `device`?" without launching anything; the
// dispatch and supported() both use them.
#pragma once

#include <cstddef>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

bool available();  // built with CUDA and at least one device is visible

// Where the runtime says `ptr` lives (a host pointer reports DeviceType::kCPU).
Status pointer_device(const void* ptr, Device* device);

Status check_forward(const core::AttentionParams& params, int device);
size_t forward_workspace_size(const core::AttentionParams& params);
Status forward(const core::AttentionParams& params, void* workspace, void* stream);

Status check_backward(const core::BackwardParams& params, int device);
size_t backward_workspace_size(const core::BackwardParams& params);
Status backward(const core::BackwardParams& params, void* stream);

Status check_kvcache(const core::KVCacheParams& params, int device);
size_t kvcache_workspace_size(const core::KVCacheParams& params);
Status forward_kvcache(const core::KVCacheParams& params, void* stream);

}  // namespace flashattn::cuda
