#include "cpu/reference_math.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "core/numeric.hpp"
#include "core/philox.hpp"

namespace flashattn::cpu::reference_detail {
namespace {

// Identity in the exact reference; in the low-precision yardstick, the value a kernel
// holds after storing it in the input dtype.
template <typename Real>
Real kernel_rounded(Real x, core::ElementType dtype) {
  if constexpr (std::is_same_v<Real, float>) {
    return core::round_to(x, dtype);
  } else {
    return x;
  }
}

template <typename Real>
Real dot(const Real* a, const Real* b, int n) {
  Real sum = 0;
  for (int t = 0; t < n; ++t) sum += a[t] * b[t];
  return sum;
}

// a += factor * b
template <typename Real>
void add_scaled(Real* a, Real factor, const Real* b, int n) {
  for (int t = 0; t < n; ++t) a[t] += factor * b[t];
}

template <typename Real>
void scale_rows(Matrix<Real>* m, Real factor) {
  for (int i = 0; i < m->rows(); ++i) {
    Real* row = m->row(i);
    for (int t = 0; t < m->cols(); ++t) row[t] *= factor;
  }
}

// scale * q.k, before softcap: the backward's softcap derivative needs it.
template <typename Real>
Real scaled_dot(const HeadRule& rule, const Matrix<Real>& q, const Matrix<Real>& k, int i,
                int j) {
  return static_cast<Real>(rule.scale) * dot(q.row(i), k.row(j), q.cols());
}

// docs/contract.md steps 2 and 3 applied to scale * q.k.
template <typename Real>
Real final_score(const HeadRule& rule, Real scaled, int i, int j) {
  Real s = scaled;
  if (rule.softcap > 0) {
    const Real cap = static_cast<Real>(rule.softcap);
    s = cap * std::tanh(s / cap);
  }
  if (rule.alibi_slope != 0) {
    const long long distance = std::llabs(static_cast<long long>(i) + rule.seqlen_k -
                                          rule.seqlen_q - j);
    s -= static_cast<Real>(rule.alibi_slope) * static_cast<Real>(distance);
  }
  return s;
}

}  // namespace

double HeadRule::dropout_factor(int row, int col) const {
  if (!dropout) return 1.0;
  const bool keep = core::dropout_keep(seed, offset, bh, static_cast<uint32_t>(row),
                                       static_cast<uint32_t>(col), drop_threshold);
  return keep ? dropout_rescale : 0.0;
}

HeadRule make_head_rule(const core::AttentionParams& params, int batch, int head, int seqlen_q,
                        int seqlen_k) {
  HeadRule rule;
  rule.seqlen_q = seqlen_q;
  rule.seqlen_k = seqlen_k;
  rule.window_left = params.window_left;
  rule.window_right = params.window_right;
  rule.scale = params.scale;
  rule.softcap = params.softcap;
  if (params.alibi_slopes != nullptr) {
    rule.alibi_slope = params.alibi_slopes[batch * params.alibi_batch_stride + head];
  }
  // P meets V in q's type: a kernel rounds P to e4m3 for an e4m3 forward, to bf16 or fp16
  // for an FP8 cache read by 16-bit queries.
  rule.dtype = params.q_type();
  rule.dropout = params.has_dropout();
  const core::DropoutKey key = core::dropout_key(params);
  rule.seed = key.seed;
  rule.offset = key.offset;
  rule.bh = static_cast<uint32_t>(batch) * static_cast<uint32_t>(params.nheads) +
            static_cast<uint32_t>(head);
  rule.drop_threshold = params.drop_threshold;
  rule.dropout_rescale = 1.0 / (1.0 - static_cast<double>(params.dropout_p));
  return rule;
}

template <typename Real>
void forward_head(const HeadRule& rule, const Matrix<Real>& q, const Matrix<Real>& k,
                  const Matrix<Real>& v, Matrix<Real>* out, std::vector<Real>* lse) {
  *out = Matrix<Real>(q.rows(), v.cols());
  lse->assign(static_cast<size_t>(q.rows()), -std::numeric_limits<Real>::infinity());
  std::vector<Real> scores;
  for (int i = 0; i < q.rows(); ++i) {
    const core::KeyRange keys = rule.visible(i);
    if (keys.begin == keys.end) continue;  // out 0, lse -inf

    scores.clear();
    Real max_score = -std::numeric_limits<Real>::infinity();
    for (int j = keys.begin; j < keys.end; ++j) {
      scores.push_back(final_score(rule, scaled_dot(rule, q, k, i, j), i, j));
      max_score = std::max(max_score, scores.back());
    }
    Real sum = 0;
    for (Real s : scores) sum += std::exp(s - max_score);
    const Real row_lse = max_score + std::log(sum);
    (*lse)[i] = row_lse;

    for (int j = keys.begin; j < keys.end; ++j) {
      const Real p = kernel_rounded(std::exp(scores[j - keys.begin] - row_lse), rule.dtype);
      add_scaled(out->row(i), p * static_cast<Real>(rule.dropout_factor(i, j)), v.row(j),
                 v.cols());
    }
  }
}

template <typename Real>
void backward_head(const HeadRule& rule, const Matrix<Real>& q, const Matrix<Real>& k,
                   const Matrix<Real>& v, const Matrix<Real>& out, const Matrix<Real>& dout,
                   const std::vector<Real>& lse, Matrix<Real>* dq, Matrix<Real>* dk,
                   Matrix<Real>* dv) {
  *dq = Matrix<Real>(q.rows(), q.cols());
  // dq and dk get the softmax scale at the end, like a kernel that rounds dS before its
  // matmuls and scales the accumulated result.
  Matrix<Real> dk_unscaled(k.rows(), k.cols());
  for (int i = 0; i < q.rows(); ++i) {
    const core::KeyRange keys = rule.visible(i);
    const Real row_lse = lse[i];
    if (keys.begin == keys.end || row_lse == -std::numeric_limits<Real>::infinity()) continue;

    const Real d_i = dot(dout.row(i), out.row(i), dout.cols());
    for (int j = keys.begin; j < keys.end; ++j) {
      const Real scaled = scaled_dot(rule, q, k, i, j);
      const Real p = std::exp(final_score(rule, scaled, i, j) - row_lse);
      const Real z = static_cast<Real>(rule.dropout_factor(i, j));

      add_scaled(dv->row(j), kernel_rounded(p, rule.dtype) * z, dout.row(i), dout.cols());
      const Real dp = dot(dout.row(i), v.row(j), v.cols()) * z;
      Real ds = p * (dp - d_i);
      if (rule.softcap > 0) {
        const Real t = std::tanh(scaled / static_cast<Real>(rule.softcap));
        ds *= Real(1) - t * t;
      }
      ds = kernel_rounded(ds, rule.dtype);
      add_scaled(dq->row(i), ds, k.row(j), k.cols());
      add_scaled(dk_unscaled.row(j), ds, q.row(i), q.cols());
    }
  }
  const Real scale = static_cast<Real>(rule.scale);
  scale_rows(dq, scale);
  for (int j = 0; j < k.rows(); ++j) add_scaled(dk->row(j), scale, dk_unscaled.row(j), k.cols());
}

template void forward_head<float>(const HeadRule&, const Matrix<float>&, const Matrix<float>&,
                                  const Matrix<float>&, Matrix<float>*, std::vector<float>*);
template void forward_head<double>(const HeadRule&, const Matrix<double>&,
                                   const Matrix<double>&, const Matrix<double>&,
                                   Matrix<double>*, std::vector<double>*);
template void backward_head<float>(const HeadRule&, const Matrix<float>&, const Matrix<float>&,
                                   const Matrix<float>&, const Matrix<float>&,
                                   const Matrix<float>&, const std::vector<float>&,
                                   Matrix<float>*, Matrix<float>*, Matrix<float>*);
template void backward_head<double>(const HeadRule&, const Matrix<double>&,
                                    const Matrix<double>&, const Matrix<double>&,
                                    const Matrix<double>&, const Matrix<double>&,
                                    const std::vector<double>&, Matrix<double>*,
                                    Matrix<double>*, Matrix<double>*);

}  // namespace flashattn::cpu::reference_detail
