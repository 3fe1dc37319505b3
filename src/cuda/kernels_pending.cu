// Entry points of the CUDA backend whose kernels have not landed yet (KV cache): each call is
// rejected as unsupported, so the dispatch reports it instead of running anything.
#include "cuda/backend.hpp"

namespace flashattn::cuda {
namespace {
Status pending(const char* what) {
  return Status(StatusCode::kUnsupported,
                std::string("the CUDA ") + what + " is not implemented yet; use Backend::kCpu");
}
}  // namespace

Status check_kvcache(const core::KVCacheParams&, int) { return pending("KV-cache kernel"); }
size_t kvcache_workspace_size(const core::KVCacheParams&) { return 0; }
Status forward_kvcache(const core::KVCacheParams&, void*) { return pending("KV-cache kernel"); }

}  // namespace flashattn::cuda
