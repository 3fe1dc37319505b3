// The KV-cache call's padding path, for what the attention kernels cannot read in place: a
// head dim that is not a multiple of 8 (they load 16-byte chunks; 16 for an e4m3 cache) or a
// cache whose pointer or strides are not 16-byte aligned. The append writes the caller's cache
// itself (element by element, so any head dim and alignment; rotated as on the fast path), and
// only then are q and each entry's cache rows in use copied, zero-padded to whole chunks, into
// the workspace: a contiguous cache per batch entry, so cache_batch_idx and block_table are
// resolved by the copy. The attention runs there and the first head_dim columns of its
// output are copied into the caller's. Zero columns change no dot product, so the result is
// the unpadded one (the softmax scale is the caller's, carried explicitly by the API).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda {

// Whether the call must go through the padded copies.
bool kvcache_needs_padding(const core::KVCacheParams& params);

// The head dim of the copies: head_dim rounded up to a multiple of 8 (16 with an e4m3 cache,
// whose 16-byte chunks hold 16 elements).
int kvcache_padded_dim(const core::KVCacheParams& params);

// Bytes of the copies (q, k and v caches of batch x capacity rows, out), a multiple of 256.
uint64_t kvcache_padded_bytes(const core::KVCacheParams& params);

// The call on the copies at `copies` (null: the same layout at offset 0, for planning): the
// caller's params with q, the caches and out replaced, head dim kvcache_padded_dim(), and
// the caches contiguous per batch entry (no cache_batch_idx, no block_table). Everything
// else, cache_seqlens, leftpad, the appended count, rotary (for q), lse, is the caller's.
core::KVCacheParams kvcache_padded_params(const core::KVCacheParams& params, void* copies);

// Copies q and, for each batch entry b, cache positions [0, cache_seqlens[b] + appended) of
// its cache into `padded`'s buffers. Runs after the append, on the same stream.
Status pad_kvcache_inputs(const core::KVCacheParams& params, const core::KVCacheParams& padded,
                          cudaStream_t stream);

// The first head_dim columns of the padded output into params.out.
Status unpad_kvcache_output(const core::KVCacheParams& params,
                            const core::KVCacheParams& padded, cudaStream_t stream);

}  // namespace flashattn::cuda
