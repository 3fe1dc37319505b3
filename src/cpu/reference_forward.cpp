// reference_forward: docs/contract.md's function, one (sequence, query head) per task.
#include <cstdint>
#include <vector>

#include "cpu/reference.hpp"
#include "cpu/reference_layout.hpp"
#include "cpu/reference_math.hpp"

namespace flashattn::cpu {
namespace {

using namespace reference_detail;

template <typename Real>
void forward_all(const core::AttentionParams& params) {
  const int group = params.nheads / params.nheads_k;
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads;
#pragma omp parallel for schedule(dynamic) if (worth_threads(params))
  for (int64_t task = 0; task < tasks; ++task) {
    const int b = static_cast<int>(task / params.nheads);
    const int h = static_cast<int>(task % params.nheads);
    const core::SequenceRows span = core::sequence_rows(params, b);
    const HeadRule rule = make_head_rule(params, b, h, span.seqlen_q, span.seqlen_k);

    const int hk = h / group;
    const Matrix<Real> q =
        gather_head<Real>(params.q, params.q_type(), span.batch, span.q_row0, span.seqlen_q, h,
                          params.head_dim, params.q_descale.at(b, hk));
    const Matrix<Real> k =
        gather_head<Real>(params.k, params.kv_type(), span.batch, span.k_row0, span.seqlen_k,
                          hk, params.head_dim, params.k_descale.at(b, hk));
    const Matrix<Real> v =
        gather_head<Real>(params.v, params.kv_type(), span.batch, span.k_row0, span.seqlen_k,
                          hk, params.head_dim_v, params.v_descale.at(b, hk));
    Matrix<Real> out;
    std::vector<Real> lse;
    forward_head(rule, q, k, v, &out, &lse);
    scatter_head(out, params.out, params.dtype, span.batch, span.q_row0, h);
    store_lse(params, span, h, lse);
  }
}

}  // namespace

Status reference_forward(const core::AttentionParams& params, ReferencePrecision precision) {
  if (precision == ReferencePrecision::kExact) {
    forward_all<double>(params);
  } else {
    forward_all<float>(params);
  }
  return Status::Ok();
}

}  // namespace flashattn::cpu
