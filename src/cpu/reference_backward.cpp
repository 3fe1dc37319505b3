// reference_backward: analytic gradients of docs/contract.md's function. One task per (sequence,
// KV head) so the query heads of a GQA group sum into dk/dv without sharing them between
// threads.
#include <cstdint>
#include <vector>

#include "cpu/reference.hpp"
#include "cpu/reference_layout.hpp"
#include "cpu/reference_math.hpp"

namespace flashattn::cpu {
namespace {

using namespace reference_detail;

template <typename Real>
std::vector<Real> load_lse(const core::AttentionParams& params, const core::SequenceRows& span,
                           int head) {
  std::vector<Real> lse(static_cast<size_t>(span.seqlen_q));
  for (int i = 0; i < span.seqlen_q; ++i) lse[i] = params.lse[core::lse_offset(params, span, head, i)];
  return lse;
}

template <typename Real>
void backward_all(const core::BackwardParams& params) {
  const int group = params.nheads / params.nheads_k;
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads_k;
  const core::ElementType type = params.dtype;
#pragma omp parallel for schedule(dynamic) if (worth_threads(params))
  for (int64_t task = 0; task < tasks; ++task) {
    const int b = static_cast<int>(task / params.nheads_k);
    const int hk = static_cast<int>(task % params.nheads_k);
    const core::SequenceRows span = core::sequence_rows(params, b);

    // Every row of the sequence, so keys past seqused_k get their zero gradient.
    const Matrix<Real> k = gather_head<Real>(params.k, type, span.batch, span.k_row0,
                                             span.rows_k, hk, params.head_dim);
    const Matrix<Real> v = gather_head<Real>(params.v, type, span.batch, span.k_row0,
                                             span.rows_k, hk, params.head_dim_v);
    Matrix<Real> dk(span.rows_k, params.head_dim);
    Matrix<Real> dv(span.rows_k, params.head_dim_v);

    for (int h = hk * group; h < (hk + 1) * group; ++h) {
      const HeadRule rule = make_head_rule(params, b, h, span.seqlen_q, span.seqlen_k);
      const auto gather_q_rows = [&](const core::Operand& op, int cols) {
        return gather_head<Real>(op, type, span.batch, span.q_row0, span.seqlen_q, h, cols);
      };
      const Matrix<Real> q = gather_q_rows(params.q, params.head_dim);
      const Matrix<Real> out = gather_q_rows(params.out, params.head_dim_v);
      const Matrix<Real> dout = gather_q_rows(params.dout, params.head_dim_v);
      Matrix<Real> dq;
      backward_head(rule, q, k, v, out, dout, load_lse<Real>(params, span, h), &dq, &dk, &dv);
      scatter_head(dq, params.dq, type, span.batch, span.q_row0, h);
    }
    scatter_head(dk, params.dk, type, span.batch, span.k_row0, hk);
    scatter_head(dv, params.dv, type, span.batch, span.k_row0, hk);
  }
}

}  // namespace

Status reference_backward(const core::BackwardParams& params, ReferencePrecision precision) {
  if (precision == ReferencePrecision::kExact) {
    backward_all<double>(params);
  } else {
    backward_all<float>(params);
  }
  return Status::Ok();
}

}  // namespace flashattn::cpu
