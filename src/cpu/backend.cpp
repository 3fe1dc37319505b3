#include "cpu/backend.hpp"

#include "cpu/reference.hpp"

namespace flashattn::cpu {

const char* implementation() { return "reference"; }

Status forward(const core::AttentionParams& params) { return reference_forward(params); }
Status backward(const core::BackwardParams& params) { return reference_backward(params); }
Status forward_kvcache(const core::KVCacheParams& params) {
  return reference_forward_kvcache(params);
}

}  // namespace flashattn::cpu
