// The forward's padding path: head dims without a compiled kernel (d % 8 != 0, or between the
// compiled sizes) and inputs whose addresses or strides are not 16-byte aligned are copied
// into a contiguous, zero-padded layout in the caller's workspace, run there, and the output
// is copied back. Zero columns change no dot product and give zero output columns, so the
// result is the unpadded one; the softmax scale stays the caller's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// Bytes of workspace the padded run of `params` with head dim `padded_dim` needs.
size_t padded_workspace_bytes(const core::AttentionParams& params, int padded_dim);

// Copies q, k, v into `workspace` and returns in `padded` the params that describe the
// copies (head dim `padded_dim`, out pointing at the padded output buffer).
Status pad_inputs(const core::AttentionParams& params, int padded_dim, void* workspace,
                  cudaStream_t stream, core::AttentionParams* padded);

// The pieces, shared with the backward's padding path (backward_pad.cu). A contiguous
// [rows, heads, dim] operand over `ptr` (batch_stride: seqlen rows, 0 when varlen):
core::Operand contiguous(void* ptr, const core::AttentionParams& p, int heads, int seqlen, int dim);
// to[r][h][c] = from(r, h, c) for c < dim and r below *valid_rows (when given), else 0; `seqlen`
// is the rows per batch entry of a dense operand.
Status pad_copy(const core::Operand& from, const core::AttentionParams& p, int seqlen,
                int64_t rows, int heads, int dim, int padded_dim, const int32_t* valid_rows,
                void* to, cudaStream_t stream);
// to(r, h, c) = from[r][h][c] for c < dim and r below *valid_rows (when given).
Status unpad_copy(const void* from, int64_t rows, int heads, int dim, int padded_dim,
                  const int32_t* valid_rows, const core::Operand& to,
                  const core::AttentionParams& p, int seqlen, cudaStream_t stream);

// Copies the first head_dim_v columns of the padded output back into params.out.
Status unpad_output(const core::AttentionParams& params, const core::AttentionParams& padded,
                    cudaStream_t stream);

}  // namespace flashattn::cuda
