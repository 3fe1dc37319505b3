// The CUDA backend of a build configured with FLASHATTN_CUDA=OFF.
#include "cuda/backend.hpp"

namespace flashattn::cuda {
namespace {
Status no_cuda() {
  return Status(StatusCode::kUnsupported,
                "this flashattn build has no CUDA backend (configured with FLASHATTN_CUDA=OFF)");
}
}  // namespace

bool available() { return false; }

Status pointer_device(const void*, Device* device) {
  *device = Device{DeviceType::kCPU, 0};
  return Status::Ok();
}

Status check_forward(const core::AttentionParams&, int) { return no_cuda(); }
size_t forward_workspace_size(const core::AttentionParams&) { return 0; }
Status forward(const core::AttentionParams&, void*, void*) { return no_cuda(); }
Status check_backward(const core::BackwardParams&, int) { return no_cuda(); }
size_t backward_workspace_size(const core::BackwardParams&) { return 0; }
Status backward(const core::BackwardParams&, void*) { return no_cuda(); }
Status check_kvcache(const core::KVCacheParams&, int) { return no_cuda(); }
size_t kvcache_workspace_size(const core::KVCacheParams&) { return 0; }
Status forward_kvcache(const core::KVCacheParams&, void*) { return no_cuda(); }

}  // namespace flashattn::cuda
