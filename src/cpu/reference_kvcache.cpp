// reference_forward_kvcache: docs/contract.md "Decoding with a KV cache". The new keys/values are
// appended (rotated) into the cache first, then each (batch entry, query head) attends
// over its cache positions [leftpad, cache_seqlens[b] + seqlen_new) as logical keys
// 0 .. sk-1.
#include <cstdint>
#include <vector>

#include "cpu/reference.hpp"
#include "cpu/reference_layout.hpp"
#include "cpu/reference_math.hpp"

namespace flashattn::cpu {
namespace {

using namespace reference_detail;

// Element offset of cache position `position` of KV head `head` for batch entry `b`:
// through block_table when paged, else in cache row cache_batch_idx[b] (or b).
int64_t cache_offset(const core::KVCacheParams& params, const core::Operand& cache, int b,
                     int position, int head) {
  if (params.is_paged()) {
    const int64_t page =
        params.block_table[b * params.block_table_batch_stride + position / params.page_size];
    return core::element_offset(cache, page, position % params.page_size, head);
  }
  const int64_t row = params.cache_batch_idx != nullptr ? params.cache_batch_idx[b] : b;
  return core::element_offset(cache, row, position, head);
}

int appended_rows(const core::KVCacheParams& params) {
  return params.k_new.ptr != nullptr ? params.seqlen_new : 0;
}

// Rotates the first rotary_dim entries of `x` to absolute position `position`, pairing
// (x[2i], x[2i+1]) when interleaved (GPT-J) and (x[i], x[i + rotary_dim/2]) otherwise
// (GPT-NeoX). Computed in double; the caller rounds to the dtype as a kernel stores it.
template <typename Real>
void rotate(const core::KVCacheParams& params, int position, Real* x) {
  const int half = params.rotary_dim / 2;
  const int64_t table_row = static_cast<int64_t>(position) * params.rotary_row_stride;
  for (int i = 0; i < half; ++i) {
    const double c = core::load_element(params.rotary_cos, table_row + i, params.dtype);
    const double s = core::load_element(params.rotary_sin, table_row + i, params.dtype);
    Real& first = x[params.rotary_interleaved ? 2 * i : i];
    Real& second = x[params.rotary_interleaved ? 2 * i + 1 : i + half];
    const double x0 = first, x1 = second;
    first = static_cast<Real>(x0 * c - x1 * s);
    second = static_cast<Real>(x0 * s + x1 * c);
  }
}

// New rows into the cache, in its type (core::appended_value: an e4m3 cache divides by the
// descale first).
template <typename RowOffset>
void store_in_cache(const core::KVCacheParams& params, const Matrix<double>& rows,
                    const core::Operand& cache, float descale, RowOffset row_offset) {
  for (int r = 0; r < rows.rows(); ++r) {
    const int64_t start = row_offset(r);
    for (int c = 0; c < rows.cols(); ++c) {
      core::store_element(cache.ptr, start + c, params.kv_type(),
                          core::appended_value(static_cast<float>(rows.row(r)[c]),
                                               params.kv_e4m3, descale));
    }
  }
}

void append_new_keys(const core::KVCacheParams& params) {
  const int rows = appended_rows(params);
  const bool rotary = params.rotary_cos != nullptr;
  for (int b = 0; b < params.batch; ++b) {
    for (int hk = 0; hk < params.nheads_k; ++hk) {
      const auto new_row = [&](const core::Operand& op) {
        return [&op, b, hk](int t) { return core::element_offset(op, b, t, hk); };
      };
      const auto cache_row = [&](const core::Operand& cache) {
        return [&params, &cache, b, hk](int t) {
          return cache_offset(params, cache, b, params.cache_seqlens[b] + t, hk);
        };
      };
      Matrix<double> k = gather_rows<double>(params.k_new.ptr, params.dtype, rows,
                                             params.head_dim, new_row(params.k_new));
      if (rotary) {
        for (int t = 0; t < rows; ++t) rotate(params, params.cache_seqlens[b] + t, k.row(t));
      }
      const Matrix<double> v = gather_rows<double>(params.v_new.ptr, params.dtype, rows,
                                                   params.head_dim_v, new_row(params.v_new));
      store_in_cache(params, k, params.k, params.k_descale.at(b, hk), cache_row(params.k));
      store_in_cache(params, v, params.v, params.v_descale.at(b, hk), cache_row(params.v));
    }
  }
}

// Query row i's rotary position: FlashAttention-2 rotates every query row at the first
// new position unless the attention is causal or windowed, where row i sits at +i.
int query_position(const core::KVCacheParams& params, int b, int row) {
  return params.cache_seqlens[b] + (params.has_window() ? row : 0);
}

template <typename Real>
void attend_all(const core::KVCacheParams& params) {
  const int group = params.nheads / params.nheads_k;
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads;
#pragma omp parallel for schedule(dynamic) if (worth_threads(params))
  for (int64_t task = 0; task < tasks; ++task) {
    const int b = static_cast<int>(task / params.nheads);
    const int h = static_cast<int>(task % params.nheads);
    const int hk = h / group;
    const int leftpad = params.cache_leftpad != nullptr ? params.cache_leftpad[b] : 0;
    core::SequenceRows span;
    span.batch = b;
    span.seqlen_q = params.seqlen_q;
    span.seqlen_k = params.cache_seqlens[b] + appended_rows(params) - leftpad;
    const HeadRule rule = make_head_rule(params, b, h, span.seqlen_q, span.seqlen_k);

    Matrix<Real> q =
        gather_head<Real>(params.q, params.q_type(), b, 0, span.seqlen_q, h, params.head_dim);
    if (params.rotary_cos != nullptr) {
      for (int i = 0; i < q.rows(); ++i) {
        rotate(params, query_position(params, b, i), q.row(i));
        for (int c = 0; c < params.rotary_dim; ++c) {
          q.row(i)[c] = core::round_to(static_cast<float>(q.row(i)[c]), params.q_type());
        }
      }
    }
    const auto key_row = [&](const core::Operand& cache) {
      return [&params, &cache, b, hk, leftpad](int j) {
        return cache_offset(params, cache, b, leftpad + j, hk);
      };
    };
    const Matrix<Real> k =
        gather_rows<Real>(params.k.ptr, params.kv_type(), span.seqlen_k, params.head_dim,
                          key_row(params.k), params.k_descale.at(b, hk));
    const Matrix<Real> v =
        gather_rows<Real>(params.v.ptr, params.kv_type(), span.seqlen_k, params.head_dim_v,
                          key_row(params.v), params.v_descale.at(b, hk));
    Matrix<Real> out;
    std::vector<Real> lse;
    forward_head(rule, q, k, v, &out, &lse);
    scatter_head(out, params.out, params.dtype, b, 0, h);
    store_lse(params, span, h, lse);
  }
}

}  // namespace

Status reference_forward_kvcache(const core::KVCacheParams& params,
                                 ReferencePrecision precision) {
  append_new_keys(params);
  if (precision == ReferencePrecision::kExact) {
    attend_all<double>(params);
  } else {
    attend_all<float>(params);
  }
  return Status::Ok();
}

}  // namespace flashattn::cpu
