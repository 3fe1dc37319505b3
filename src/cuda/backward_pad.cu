// The backward's padding path (see backward_pad.hpp), built on the forward's copy kernels.
#include "cuda/backward_pad.hpp"

#include <cstdint>

#include "cuda/backward_workspace.hpp"
#include "cuda/forward_pad.hpp"

namespace flashattn::cuda {
namespace {

// Varlen keys keep their row numbers (cu_seqlens_k stays valid); batch * max_seqlen_k rows
// bound their total, of which the first cu_seqlens_k[batch] are real.
int64_t rows_k(const core::BackwardParams& p) { return static_cast<int64_t>(p.batch) * p.seqlen_k; }
const int32_t* valid_k_rows(const core::BackwardParams& p) {
  return p.is_varlen() ? p.cu_seqlens_k + p.batch : nullptr;
}

struct Layout {
  size_t q_bytes, k_bytes, total;  // q, out, dout, dq, then k, v, dk, dv
};

Layout layout(const core::BackwardParams& p, int dim) {
  Layout l{};
  l.q_bytes = bwd_align_up(static_cast<size_t>(p.total_q) * p.nheads * dim * 2);
  l.k_bytes = bwd_align_up(static_cast<size_t>(rows_k(p)) * p.nheads_k * dim * 2);
  l.total = 4 * l.q_bytes + 4 * l.k_bytes;
  return l;
}

}  // namespace

size_t bwd_padded_bytes(const core::BackwardParams& params, int padded_dim) {
  return layout(params, padded_dim).total;
}

Status bwd_pad_inputs(const core::BackwardParams& p, int padded_dim, cudaStream_t stream,
                      core::BackwardParams* padded) {
  const Layout l = layout(p, padded_dim);
  char* base = static_cast<char*>(p.workspace);
  auto q_like = [&](int i) { return contiguous(base + i * l.q_bytes, p, p.nheads, p.seqlen_q, padded_dim); };
  auto k_like = [&](int i) {
    return contiguous(base + 4 * l.q_bytes + i * l.k_bytes, p, p.nheads_k, p.seqlen_k, padded_dim);
  };
  *padded = p;
  padded->head_dim = padded->head_dim_v = padded_dim;
  padded->q = q_like(0);
  padded->out = q_like(1);
  padded->dout = q_like(2);
  padded->dq = q_like(3);
  padded->k = k_like(0);
  padded->v = k_like(1);
  padded->dk = k_like(2);
  padded->dv = k_like(3);
  padded->workspace = base + l.total;
  padded->workspace_bytes = p.workspace_bytes - l.total;

  struct Copy {
    const core::Operand& from;
    const core::Operand& to;
    int64_t rows;
    int heads, seqlen;
    const int32_t* valid_rows;
  };
  const Copy copies[] = {
      {p.q, padded->q, p.total_q, p.nheads, p.seqlen_q, nullptr},
      {p.out, padded->out, p.total_q, p.nheads, p.seqlen_q, nullptr},
      {p.dout, padded->dout, p.total_q, p.nheads, p.seqlen_q, nullptr},
      {p.k, padded->k, rows_k(p), p.nheads_k, p.seqlen_k, valid_k_rows(p)},
      {p.v, padded->v, rows_k(p), p.nheads_k, p.seqlen_k, valid_k_rows(p)},
  };
  for (const Copy& c : copies) {
    const Status copied = pad_copy(c.from, p, c.seqlen, c.rows, c.heads, p.head_dim, padded_dim,
                                   c.valid_rows, c.to.ptr, stream);
    if (!copied.ok()) return copied;
  }
  return Status::Ok();
}

Status bwd_unpad_gradients(const core::BackwardParams& p, const core::BackwardParams& padded,
                           cudaStream_t stream) {
  const int dim = padded.head_dim;
  Status s = unpad_copy(padded.dq.ptr, p.total_q, p.nheads, p.head_dim, dim, nullptr, p.dq, p,
                        p.seqlen_q, stream);
  if (!s.ok()) return s;
  s = unpad_copy(padded.dk.ptr, rows_k(p), p.nheads_k, p.head_dim, dim, valid_k_rows(p), p.dk, p,
                 p.seqlen_k, stream);
  if (!s.ok()) return s;
  return unpad_copy(padded.dv.ptr, rows_k(p), p.nheads_k, p.head_dim, dim, valid_k_rows(p), p.dv,
                    p, p.seqlen_k, stream);
}

}  // namespace flashattn::cuda
