// The forward's padding path: head dims without a compiled kernel (d % 8 != 0, or between the
// compiled sizes) and inputs whose addresses or strides are not 16-byte aligned are copied
// into a contiguous, zero-padded layout in the caller's workspace, run there, and the output
// is copied back. Zero columns change no dot product and give zero output columns, so the
// result is the unpadded one; the softmax scale stays the caller's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// Bytes of workspace the padded run of `params` with head dim `padded_dim` needs.
size_t padded_workspace_bytes(const core::AttentionParams& params, int padded_dim);

// Copies q, k, v into `workspace` and returns in `padded` the params that describe the
// copies (head dim `padded_dim`, out pointing at the padded output buffer).
Status pad_inputs(const core::AttentionParams& params, int padded_dim, void* workspace,
                  cudaStream_t stream, core::AttentionParams* padded);

// Copies the first head_dim_v columns of the padded output back into params.out.
Status unpad_output(const core::AttentionParams& params, const core::AttentionParams& padded,
                    cudaStream_t stream);

}  // namespace flashattn::cuda
