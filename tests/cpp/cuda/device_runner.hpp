// The CUDA backend as a fa_test::Runner, so the GPU tests run the shared problems and checks
// (support/reference_problem.hpp, support/kvcache_problem.hpp) through the public API.
//
// Each call copies every present tensor of the host arguments to the device, whole
// underlying span included (the gaps of strided views keep their strides and contents, and
// the pointer keeps its alignment modulo 16), fills the elements of outputs with NaN bytes,
// allocates the queried workspace (also NaN-filled), calls the entry point with
// Backend::kCuda on a stream of its own, synchronizes, checks for CUDA errors and copies
// every output span, gaps included, back over the host tensor. A kernel that skips an
// element leaves NaN; one that writes into a gap changes the host gap bytes.
//
// Each tensor gets its own device copy: views that share host memory do not share device
// memory, which is harmless for inputs and must not be relied upon for outputs.
#pragma once

#include <cstddef>

#include "flashattn/flashattn.hpp"
#include "support/backend_runner.hpp"

namespace fa_cuda_test {

// flashattn::forward / backward / forward_kvcache with Backend::kCuda.
fa_test::Runner cuda_runner();

// flashattn::supported(args, Backend::kCuda) over the same device copies: host arguments
// would be rejected as host memory before support is even considered. (Outputs come back
// as the NaN they were poisoned with.)
fa_test::Runner cuda_support_runner();

// flashattn::workspace_size(args, Backend::kCuda, bytes) over device copies of the arguments.
flashattn::Status cuda_workspace_size(const flashattn::ForwardArgs& host_args, size_t* bytes);
flashattn::Status cuda_workspace_size(const flashattn::KVCacheArgs& host_args, size_t* bytes);

}  // namespace fa_cuda_test
