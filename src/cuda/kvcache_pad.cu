// The KV-cache call's padding path (see kvcache_pad.hpp): the layout of the copies in the
// workspace and the copy kernel that gathers each entry's cache rows into them.
#include "cuda/kvcache_pad.hpp"

#include <cstdint>

#include "cuda/check.hpp"
#include "cuda/forward_pad.hpp"
#include "cuda/kvcache_address.cuh"
#include "cuda/operand_traits.hpp"

namespace flashattn::cuda {
namespace {

constexpr uint64_t kAlign = 256;
constexpr uint64_t kElement = 2;  // q and out: fp16 and bf16, the dtypes the CUDA backend runs

// Bytes of a cache element: 1 for an e4m3 cache.
int cache_element(const core::KVCacheParams& p) { return p.kv_e4m3 ? 1 : 2; }

uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct PadLayout {
  uint64_t q, k, v, out, total;  // byte offsets
};

uint64_t query_rows(const core::KVCacheParams& p) {
  return static_cast<uint64_t>(p.batch) * p.seqlen_q;
}

// The padded caches hold every batch entry's whole capacity (seqlen_k positions): which of
// them are in use is known on the device only.
uint64_t cache_rows(const core::KVCacheParams& p) {
  return static_cast<uint64_t>(p.batch) * p.seqlen_k;
}

PadLayout pad_layout(const core::KVCacheParams& p) {
  const uint64_t dim = static_cast<uint64_t>(kvcache_padded_dim(p));
  const uint64_t q_bytes = aligned(query_rows(p) * p.nheads * dim * kElement);
  const uint64_t cache_bytes = aligned(cache_rows(p) * p.nheads_k * dim * cache_element(p));
  PadLayout l{};
  l.q = 0;
  l.k = l.q + q_bytes;
  l.v = l.k + cache_bytes;
  l.out = l.v + cache_bytes;
  l.total = l.out + q_bytes;
  return l;
}

core::Operand contiguous_operand(void* ptr, int rows_per_entry, int heads, int dim) {
  core::Operand op;
  op.ptr = ptr;
  op.head_stride = dim;
  op.row_stride = static_cast<int64_t>(heads) * dim;
  op.batch_stride = op.row_stride * rows_per_entry;
  return op;
}

// dst[b][position][hk][c] = the cache's element (b, position, hk, c) for c < dim, 0 for
// dim <= c < padded_dim, at the positions [0, cache_seqlens[b] + appended) in use; the
// positions past them are left as they are (the attention never reads them). E: the cache
// element's storage (uint16_t, or uint8_t for e4m3, whose zero is 0 too).
template <class E>
__global__ void gather_cache_kernel(const __grid_constant__ core::KVCacheParams p,
                                    core::Operand cache, int dim, int padded_dim, E* dst) {
  const int appended = p.k_new.ptr != nullptr ? p.seqlen_new : 0;
  const int64_t row_elements = static_cast<int64_t>(p.nheads_k) * padded_dim;
  const int64_t total = static_cast<int64_t>(p.batch) * p.seqlen_k * row_elements;
  const E* src = static_cast<const E*>(cache.ptr);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % padded_dim);
    const int hk = static_cast<int>((i / padded_dim) % p.nheads_k);
    const int64_t row = i / row_elements;
    const int b = static_cast<int>(row / p.seqlen_k);
    const int position = static_cast<int>(row % p.seqlen_k);
    if (position >= p.cache_seqlens[b] + appended) continue;
    dst[i] = c < dim ? src[cache_position_offset(p, cache, b, position, hk) + c] : E{0};
  }
}

unsigned grid_for(uint64_t elements) {
  const uint64_t blocks = (elements + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

bool kvcache_needs_padding(const core::KVCacheParams& p) {
  // The cache is read in place by the kernels: 16-byte chunks at 16-byte aligned addresses.
  const auto in_place = [&p](const core::Operand& cache) {
    return aligned_for_kernels(cache, /*varlen=*/false, cache_element(p));
  };
  return p.head_dim % (16 / cache_element(p)) != 0 || !in_place(p.k) || !in_place(p.v);
}

// Whole 16-byte chunks of the cache's rows (q's rows then hold whole chunks too).
int kvcache_padded_dim(const core::KVCacheParams& p) {
  const int chunk = 16 / cache_element(p);
  return (p.head_dim + chunk - 1) / chunk * chunk;
}

uint64_t kvcache_padded_bytes(const core::KVCacheParams& p) { return pad_layout(p).total; }

core::KVCacheParams kvcache_padded_params(const core::KVCacheParams& p, void* copies) {
  const PadLayout l = pad_layout(p);
  const int dim = kvcache_padded_dim(p);
  char* base = static_cast<char*>(copies);
  core::KVCacheParams padded = p;
  padded.head_dim = dim;
  padded.head_dim_v = dim;
  padded.q = contiguous_operand(base + l.q, p.seqlen_q, p.nheads, dim);
  padded.k = contiguous_operand(base + l.k, p.seqlen_k, p.nheads_k, dim);
  padded.v = contiguous_operand(base + l.v, p.seqlen_k, p.nheads_k, dim);
  padded.out = contiguous_operand(base + l.out, p.seqlen_q, p.nheads, dim);
  padded.cache_batch_idx = nullptr;
  padded.block_table = nullptr;
  padded.block_table_batch_stride = 0;
  padded.page_size = 0;
  padded.max_pages = 0;
  padded.num_pages = 0;
  return padded;
}

Status pad_kvcache_inputs(const core::KVCacheParams& p, const core::KVCacheParams& padded,
                          cudaStream_t stream) {
  const Status q_copied = pad_copy(p.q, p, p.seqlen_q, static_cast<int64_t>(query_rows(p)),
                                   p.nheads, p.head_dim, padded.head_dim, nullptr,
                                   padded.q.ptr, stream);
  if (!q_copied.ok()) return q_copied;
  const uint64_t elements = cache_rows(p) * p.nheads_k * padded.head_dim;
  if (elements == 0) return Status::Ok();
  const struct {
    const core::Operand& from;
    int dim;
    void* to;
  } caches[] = {{p.k, p.head_dim, padded.k.ptr}, {p.v, p.head_dim_v, padded.v.ptr}};
  for (const auto& cache : caches) {
    if (p.kv_e4m3) {
      gather_cache_kernel<<<grid_for(elements), 256, 0, stream>>>(
          p, cache.from, cache.dim, padded.head_dim, static_cast<uint8_t*>(cache.to));
    } else {
      gather_cache_kernel<<<grid_for(elements), 256, 0, stream>>>(
          p, cache.from, cache.dim, padded.head_dim, static_cast<uint16_t*>(cache.to));
    }
    const Status launched =
        cuda_status(cudaGetLastError(), "launching the KV-cache padding copy");
    if (!launched.ok()) return launched;
  }
  return Status::Ok();
}

Status unpad_kvcache_output(const core::KVCacheParams& p, const core::KVCacheParams& padded,
                            cudaStream_t stream) {
  return unpad_copy(padded.out.ptr, static_cast<int64_t>(query_rows(p)), p.nheads, p.head_dim_v,
                    padded.head_dim, nullptr, p.out, p, p.seqlen_q, stream);
}

}  // namespace flashattn::cuda
