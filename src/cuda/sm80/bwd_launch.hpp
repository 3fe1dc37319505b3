// Host entry points of the sm80 backward main kernel, one per (element type, head dim); each
// is defined in a generated file of src/cuda/instantiations/ (scripts/codegen.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm80 {

// The dispatch's test of a kernel family: this one runs on every sm_80-class device.
inline constexpr bool kBwdNeedsSm90a = false;

// Launches the main kernel for `params` (head dim exactly D, 16-byte aligned inputs) on
// `stream`; the workspace must hold the preprocessed D, lse and a zeroed dQ accumulator.
// kDropout: the instantiation with dropout (params.dropout_p > 0); the other ignores it.
template <class T, int D, bool kDropout>
Status run_backward(const core::BackwardParams& params, const BwdWorkspace& workspace,
                    cudaStream_t stream);

// Dynamic shared memory the kernel for head dim D needs per block.
template <class T, int D>
int backward_smem_bytes();

}  // namespace flashattn::cuda::sm80
