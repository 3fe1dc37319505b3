// The tiled FlashAttention-2 CPU backend (Backend::kCpu): blocks of Q, K and V that fit
// in cache, the online softmax, no N x N matrix; parallel over (batch, head, block) with
// OpenMP and vectorized for the widest ISA the CPU has (kernel_set.hpp). Deterministic:
// every output element is computed by one task in a fixed order.
#pragma once

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cpu::tiled {

Status forward(const core::AttentionParams& params);
Status backward(const core::BackwardParams& params);
Status forward_kvcache(const core::KVCacheParams& params);

// How backward() runs: the dK/dV and dQ passes, or one pass per (sequence, KV head)
// that computes each pair's P and dS once for both (backward.cpp). Both give the same
// bits, so kAutomatic picks by the thread count and the scratch the one pass needs.
enum class BackwardPlan { kAutomatic, kTwoPasses, kOnePass };
// Tests: run every later backward with `plan` (kAutomatic goes back to the choice).
void force_backward_plan(BackwardPlan plan);

// The ISA build the next call will use ("avx512", "avx2" or "generic"), for benchmarks.
const char* isa_name();

}  // namespace flashattn::cpu::tiled
