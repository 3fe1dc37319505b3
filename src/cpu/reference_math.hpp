// The arithmetic of docs/contract.md for one (batch, query head): dense matrices in, dense
// matrices out, no layouts. `Real` is double for ReferencePrecision::kExact and float for
// kLowPrecisionNaive; in the latter the intermediates a kernel keeps in the input dtype
// (P before P.V, dS before dS.K and dS^T.Q) are rounded to it, so the result measures how
// far an honest low-precision kernel may land from the exact answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/mask.hpp"
#include "core/params.hpp"

namespace flashattn::cpu::reference_detail {

template <typename Real>
class Matrix {
 public:
  Matrix() = default;
  Matrix(int rows, int cols)
      : rows_(rows), cols_(cols), data_(static_cast<size_t>(rows) * cols, Real(0)) {}

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  Real* row(int i) { return data_.data() + static_cast<size_t>(i) * cols_; }
  const Real* row(int i) const { return data_.data() + static_cast<size_t>(i) * cols_; }

 private:
  int rows_ = 0;
  int cols_ = 0;
  std::vector<Real> data_;
};

// How row i of one (batch, head) scores key j and which elements dropout keeps
// (docs/contract.md steps 1-4 and 6), with the sequence's own lengths.
struct HeadRule {
  int seqlen_q = 0;
  int seqlen_k = 0;
  int window_left = -1;
  int window_right = -1;
  double scale = 1.0;
  double softcap = 0.0;      // 0: off
  double alibi_slope = 0.0;  // 0: off
  core::ElementType dtype = core::ElementType::kF32;

  bool dropout = false;
  uint64_t seed = 0;
  uint64_t offset = 0;
  uint32_t bh = 0;  // b * nheads + h: the Philox counter's head coordinate
  uint32_t drop_threshold = 0;
  double dropout_rescale = 1.0;

  core::KeyRange visible(int row) const {
    return core::visible_keys(row, seqlen_q, seqlen_k, window_left, window_right);
  }
  // The factor dropout applies to p_ij: 0 when dropped, 1/(1-p) when kept, 1 when off.
  double dropout_factor(int row, int col) const;
};

// The rule of query head `head` of batch entry `batch`, whose sequence has these lengths.
HeadRule make_head_rule(const core::AttentionParams& params, int batch, int head, int seqlen_q,
                        int seqlen_k);

// out [seqlen_q, d_v] and lse [seqlen_q] of one head; a row with no visible key gets
// out = 0 and lse = -inf.
template <typename Real>
void forward_head(const HeadRule& rule, const Matrix<Real>& q, const Matrix<Real>& k,
                  const Matrix<Real>& v, Matrix<Real>* out, std::vector<Real>* lse);

// Gradients of one query head. P is recomputed from the caller's lse (as a kernel does;
// rows with lse = -inf have P = 0). dq is written; dk and dv are accumulated, so the
// query heads of a GQA group can share them.
template <typename Real>
void backward_head(const HeadRule& rule, const Matrix<Real>& q, const Matrix<Real>& k,
                   const Matrix<Real>& v, const Matrix<Real>& out, const Matrix<Real>& dout,
                   const std::vector<Real>& lse, Matrix<Real>* dq, Matrix<Real>* dk,
                   Matrix<Real>* dv);

}  // namespace flashattn::cpu::reference_detail
