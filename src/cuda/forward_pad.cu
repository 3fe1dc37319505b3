// The forward's padding path (see forward_pad.hpp): element-wise copy kernels between the
// caller's strided tensors and contiguous [rows, heads, padded_dim] buffers in the workspace.
#include "cuda/forward_pad.hpp"

#include <algorithm>
#include <cstdint>

#include "cuda/check.hpp"

namespace flashattn::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Rows of the packed q (and out) and the rows reserved for k and v. Varlen keys are copied to
// the same row numbers (cu_seqlens_k stays valid); batch * max_seqlen_k bounds their total.
int64_t rows_q(const core::AttentionParams& p) {
  return p.is_varlen() ? p.total_q : static_cast<int64_t>(p.batch) * p.seqlen_q;
}
int64_t rows_k(const core::AttentionParams& p) {
  return static_cast<int64_t>(p.batch) * p.seqlen_k;
}

struct Layout {
  size_t q, k, v, out, total;  // byte offsets
};

Layout layout(const core::AttentionParams& p, int dim) {
  Layout l{};
  const size_t q_bytes = align_up(static_cast<size_t>(rows_q(p)) * p.nheads * dim * 2);
  const size_t kv_bytes = align_up(static_cast<size_t>(rows_k(p)) * p.nheads_k * dim * 2);
  l.q = 0;
  l.k = l.q + q_bytes;
  l.v = l.k + kv_bytes;
  l.out = l.v + kv_bytes;
  l.total = l.out + q_bytes;
  return l;
}

// Where row r (of the packed rows) of a strided operand starts: dense rows are b * seqlen + s.
struct Rows {
  int64_t batch_stride, row_stride, head_stride;
  int seqlen;  // dense: rows per batch entry; 0: packed (varlen)
  __device__ int64_t offset(int64_t r, int head) const {
    if (seqlen == 0) return r * row_stride + head * head_stride;
    return (r / seqlen) * batch_stride + (r % seqlen) * row_stride + head * head_stride;
  }
};

Rows rows_of(const core::Operand& op, const core::AttentionParams& p, int seqlen) {
  return Rows{op.batch_stride, op.row_stride, op.head_stride, p.is_varlen() ? 0 : seqlen};
}

// dst[r][h][c] = src(r, h, c) for c < dim and rows below *valid_rows (when given), else 0.
__global__ void pad_kernel(const uint16_t* src, Rows from, int64_t rows, int heads, int dim,
                           int padded_dim, const int32_t* valid_rows, uint16_t* dst) {
  const int64_t total = rows * heads * padded_dim;
  const int64_t limit = valid_rows != nullptr ? *valid_rows : rows;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % padded_dim);
    const int h = static_cast<int>((i / padded_dim) % heads);
    const int64_t r = i / (static_cast<int64_t>(padded_dim) * heads);
    dst[i] = (c < dim && r < limit) ? src[from.offset(r, h) + c] : uint16_t{0};
  }
}

// dst(r, h, c) = src[r][h][c] for c < dim and rows below *valid_rows (when given).
__global__ void unpad_kernel(const uint16_t* src, int64_t rows, int heads, int dim, int padded_dim,
                             const int32_t* valid_rows, Rows to, uint16_t* dst) {
  const int64_t limit = valid_rows != nullptr ? *valid_rows : rows;
  const int64_t total = (limit < rows ? limit : rows) * heads * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % dim);
    const int h = static_cast<int>((i / dim) % heads);
    const int64_t r = i / (static_cast<int64_t>(dim) * heads);
    dst[to.offset(r, h) + c] = src[(r * heads + h) * padded_dim + c];
  }
}

unsigned grid_for(int64_t elements) {
  const int64_t blocks = (elements + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

core::Operand contiguous(void* ptr, const core::AttentionParams& p, int heads, int seqlen, int dim) {
  core::Operand op;
  op.ptr = ptr;
  op.head_stride = dim;
  op.row_stride = static_cast<int64_t>(heads) * dim;
  op.batch_stride = p.is_varlen() ? 0 : op.row_stride * seqlen;
  return op;
}

Status pad_copy(const core::Operand& from, const core::AttentionParams& p, int seqlen,
                int64_t rows, int heads, int dim, int padded_dim, const int32_t* valid_rows,
                void* to, cudaStream_t stream) {
  const int64_t elements = rows * heads * padded_dim;
  if (elements == 0) return Status::Ok();
  pad_kernel<<<grid_for(elements), 256, 0, stream>>>(
      static_cast<const uint16_t*>(from.ptr), rows_of(from, p, seqlen), rows, heads, dim,
      padded_dim, valid_rows, static_cast<uint16_t*>(to));
  return cuda_status(cudaGetLastError(), "launching a pad copy");
}

Status unpad_copy(const void* from, int64_t rows, int heads, int dim, int padded_dim,
                  const int32_t* valid_rows, const core::Operand& to,
                  const core::AttentionParams& p, int seqlen, cudaStream_t stream) {
  const int64_t elements = rows * heads * dim;
  if (elements == 0) return Status::Ok();
  unpad_kernel<<<grid_for(elements), 256, 0, stream>>>(
      static_cast<const uint16_t*>(from), rows, heads, dim, padded_dim, valid_rows,
      rows_of(to, p, seqlen), static_cast<uint16_t*>(to.ptr));
  return cuda_status(cudaGetLastError(), "launching an unpad copy");
}

size_t padded_workspace_bytes(const core::AttentionParams& params, int padded_dim) {
  return layout(params, padded_dim).total;
}

Status pad_inputs(const core::AttentionParams& p, int padded_dim, void* workspace,
                  cudaStream_t stream, core::AttentionParams* padded) {
  const Layout l = layout(p, padded_dim);
  char* base = static_cast<char*>(workspace);
  *padded = p;
  padded->head_dim = padded_dim;
  padded->head_dim_v = padded_dim;
  padded->q = contiguous(base + l.q, p, p.nheads, p.seqlen_q, padded_dim);
  padded->k = contiguous(base + l.k, p, p.nheads_k, p.seqlen_k, padded_dim);
  padded->v = contiguous(base + l.v, p, p.nheads_k, p.seqlen_k, padded_dim);
  padded->out = contiguous(base + l.out, p, p.nheads, p.seqlen_q, padded_dim);
  // The rows of the varlen k and v copies (the caller's may hold fewer, or more unused ones).
  constexpr int64_t kMaxRows = 2147483647;
  if (p.is_varlen()) padded->total_k = static_cast<int>(std::min(rows_k(p), kMaxRows));

  const int32_t* k_rows = p.is_varlen() ? p.cu_seqlens_k + p.batch : nullptr;
  struct Copy {
    const core::Operand& from;
    const core::Operand& to;
    int64_t rows;
    int heads, dim, seqlen;
    const int32_t* valid_rows;
  };
  const Copy copies[] = {
      {p.q, padded->q, rows_q(p), p.nheads, p.head_dim, p.seqlen_q, nullptr},
      {p.k, padded->k, rows_k(p), p.nheads_k, p.head_dim, p.seqlen_k, k_rows},
      {p.v, padded->v, rows_k(p), p.nheads_k, p.head_dim_v, p.seqlen_k, k_rows},
  };
  for (const Copy& c : copies) {
    const Status copied = pad_copy(c.from, p, c.seqlen, c.rows, c.heads, c.dim, padded_dim,
                                   c.valid_rows, c.to.ptr, stream);
    if (!copied.ok()) return copied;
  }
  return Status::Ok();
}

Status unpad_output(const core::AttentionParams& p, const core::AttentionParams& padded,
                    cudaStream_t stream) {
  return unpad_copy(padded.out.ptr, rows_q(p), p.nheads, p.head_dim_v, padded.head_dim, nullptr,
                    p.out, p, p.seqlen_q, stream);
}

}  // namespace flashattn::cuda
