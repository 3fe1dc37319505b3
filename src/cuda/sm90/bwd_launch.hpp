// Host entry points of the sm90 (wgmma) backward main kernel, one per (element type, head dim)
// of bwd_sm90_tile; each is defined in a generated file of src/cuda/instantiations/
// (scripts/codegen.py). Same contract as sm80/bwd_launch.hpp; the caller runs these only on a
// device that runs sm_90a code (DeviceLimits::sm90a).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm90 {

// The dispatch's test of a kernel family: this one needs sm_90a code.
inline constexpr bool kBwdNeedsSm90a = true;

template <class T, int D, bool kDropout>
Status run_backward(const core::BackwardParams& params, const BwdWorkspace& workspace,
                    cudaStream_t stream);

template <class T, int D>
int backward_smem_bytes();

}  // namespace flashattn::cuda::sm90
