// The backward's padding path, as the forward's (forward_pad.hpp): head dims without a
// compiled backward kernel (d <= 128 not in 32, 64, 96, 128) and views the kernel cannot read
// in place are copied into contiguous, zero-padded buffers in the workspace; the backward runs
// there and dq, dk, dv are copied back. Zero columns change no dot product (S, dP and D are
// those of the unpadded problem) and give zero gradient columns; the scale stays the caller's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// Bytes of the padded copies (q, out, dout, dq and k, v, dk, dv) for head dim `padded_dim`.
size_t bwd_padded_bytes(const core::BackwardParams& params, int padded_dim);

// Copies q, k, v, out, dout into params.workspace and returns in `padded` the params of the
// padded problem: operands and gradients in the workspace, the rest of the workspace after them.
Status bwd_pad_inputs(const core::BackwardParams& params, int padded_dim, cudaStream_t stream,
                      core::BackwardParams* padded);

// Copies the first head_dim columns of the padded dq, dk, dv back into the caller's tensors.
Status bwd_unpad_gradients(const core::BackwardParams& params, const core::BackwardParams& padded,
                           cudaStream_t stream);

}  // namespace flashattn::cuda
