// The benchmarked problem: random inputs made once on the host, copied into as many
// buffer sets as it takes to exceed the device's last-level cache, and its FLOP count.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "memory.hpp"
#include "options.hpp"

namespace fa_bench {

// Inputs in the benchmark dtype, as bytes.
struct HostInputs {
  flashattn::DType dtype;
  std::vector<uint8_t> q, k, v, dout;
};

// One set of buffers on the benchmark's device, with the public-API views of them.
struct BufferSet {
  flashattn::Tensor q, k, v, out, lse, dout, dq, dk, dv;
};

HostInputs make_inputs(const Options& options, flashattn::DType dtype, uint32_t seed);

// Returns false when the device memory runs out.
bool make_buffer_set(Memory& memory, const Options& options, const HostInputs& inputs,
                     BufferSet* set);

// Sets needed so that cycling through them does not run from the cache (1 on the CPU).
int buffer_sets_needed(const Memory& memory, const Options& options, flashattn::DType dtype);

flashattn::AttentionOptions attention_options(const Options& options);
flashattn::ForwardArgs forward_args(const BufferSet& set, const Options& options);
flashattn::BackwardArgs backward_args(const BufferSet& set, const Options& options);

// FlashAttention-2's convention: 4 * b * h * sq * sk * d for the forward, halved when
// causal; a sliding window counts its visible pairs. The backward is 2.5x the forward.
double forward_flops(const Options& options);

}  // namespace fa_bench
