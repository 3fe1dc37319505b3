#include "cpu/backend.hpp"

#include "cpu/tiled/tiled.hpp"

namespace flashattn::cpu {

const char* implementation() { return "tiled"; }

Status forward(const core::AttentionParams& params) { return tiled::forward(params); }
Status backward(const core::BackwardParams& params) { return tiled::backward(params); }
Status forward_kvcache(const core::KVCacheParams& params) {
  return tiled::forward_kvcache(params);
}

}  // namespace flashattn::cpu
