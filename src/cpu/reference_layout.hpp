// Where the reference finds the rows of one sequence in the caller's strided tensors, the
// moves between those tensors and the dense matrices of reference_math.hpp, and when the
// per-head work is worth threads. Values are read with core::load_element and written in
// the tensor's dtype with core::store_element; every offset is 64-bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/numeric.hpp"
#include "core/params.hpp"
#include "core/sequence.hpp"
#include "cpu/reference_math.hpp"

namespace flashattn::cpu::reference_detail {

// OpenMP only pays off past some work; below it, waking threads on a busy machine costs
// more than the whole call (the tests run thousands of tiny ones).
inline bool worth_threads(const core::AttentionParams& params) {
  const double work = double(params.batch) * params.nheads * params.seqlen_q * params.seqlen_k *
                      (params.head_dim + params.head_dim_v);
  return work > double(1 << 20);
}

// `rows` x `cols` elements times `descale` (an FP8 operand's factor; 1 otherwise); row r
// starts at element row_offset(r) of `base`.
template <typename Real, typename RowOffset>
Matrix<Real> gather_rows(const void* base, core::ElementType type, int rows, int cols,
                         RowOffset row_offset, float descale = 1.f) {
  Matrix<Real> m(rows, cols);
  for (int r = 0; r < rows; ++r) {
    const int64_t start = row_offset(r);
    Real* dst = m.row(r);
    for (int c = 0; c < cols; ++c) {
      dst[c] = static_cast<Real>(core::load_element(base, start + c, type)) * Real(descale);
    }
  }
  return m;
}

template <typename Real, typename RowOffset>
void scatter_rows(const Matrix<Real>& m, void* base, core::ElementType type,
                  RowOffset row_offset) {
  for (int r = 0; r < m.rows(); ++r) {
    const int64_t start = row_offset(r);
    const Real* src = m.row(r);
    for (int c = 0; c < m.cols(); ++c) {
      core::store_element(base, start + c, type, static_cast<float>(src[c]));
    }
  }
}

// Rows row0 .. row0+rows-1 of head `head` of `op`.
template <typename Real>
Matrix<Real> gather_head(const core::Operand& op, core::ElementType type, int64_t batch,
                         int64_t row0, int rows, int head, int cols, float descale = 1.f) {
  return gather_rows<Real>(
      op.ptr, type, rows, cols,
      [&](int r) { return core::element_offset(op, batch, row0 + r, head); }, descale);
}

template <typename Real>
void scatter_head(const Matrix<Real>& m, const core::Operand& op, core::ElementType type,
                  int64_t batch, int64_t row0, int head) {
  scatter_rows(m, op.ptr, type, [&](int r) { return core::element_offset(op, batch, row0 + r, head); });
}

template <typename Real>
void store_lse(const core::AttentionParams& params, const core::SequenceRows& span, int head,
               const std::vector<Real>& lse) {
  if (params.lse == nullptr) return;
  for (int i = 0; i < static_cast<int>(lse.size()); ++i) {
    params.lse[core::lse_offset(params, span, head, i)] = static_cast<float>(lse[i]);
  }
}

}  // namespace flashattn::cpu::reference_detail
