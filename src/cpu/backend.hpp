// The CPU backend behind Backend::kCpu (and kAuto for host tensors). Until the tiled
// FlashAttention-2 CPU kernels land it runs the reference, and implementation() says so.
#pragma once

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cpu {

const char* implementation();  // "reference" or "tiled"

Status forward(const core::AttentionParams& params);
Status backward(const core::BackwardParams& params);
Status forward_kvcache(const core::KVCacheParams& params);

}  // namespace flashattn::cpu
