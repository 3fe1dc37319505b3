// The CPU backend behind Backend::kCpu (and kAuto for host tensors): the tiled
// FlashAttention-2 kernels of src/cpu/tiled.
#pragma once

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cpu {

const char* implementation();  // "tiled"

Status forward(const core::AttentionParams& params);
Status backward(const core::BackwardParams& params);
Status forward_kvcache(const core::KVCacheParams& params);

}  // namespace flashattn::cpu
