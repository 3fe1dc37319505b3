#include "api/validate_parts.hpp"

#include <algorithm>
#include <cstdint>

#include "core/numeric.hpp"
#include "core/params.hpp"

namespace flashattn::api {
namespace {

constexpr int64_t kMaxHeadDim = core::kMaxHeadDim;

// The leading dimensions of a query-side or key-side operand.
Shape leading(const Sizes& s, bool query_side) {
  if (s.varlen) return {{query_side ? s.rows_q : s.rows_k, query_side ? "total_q" : "total_k"}};
  return {{s.batch, "batch"},
          {query_side ? s.rows_q : s.rows_k, query_side ? "seqlen_q" : "seqlen_k"}};
}

Shape with(Shape shape, Dim heads, Dim dim) {
  shape.push_back(heads);
  shape.push_back(dim);
  return shape;
}

}  // namespace

Shape Sizes::q() const {
  return with(leading(*this, true), {nheads, "nheads"}, {head_dim, "head_dim"});
}
Shape Sizes::k() const {
  return with(leading(*this, false), {nheads_k, "nheads_k"}, {head_dim, "head_dim"});
}
Shape Sizes::v() const {
  return with(leading(*this, false), {nheads_k, "nheads_k"}, {head_dim_v, "head_dim_v"});
}
Shape Sizes::out() const {
  return with(leading(*this, true), {nheads, "nheads"}, {head_dim_v, "head_dim_v"});
}
Shape Sizes::lse() const {
  if (varlen) return {{nheads, "nheads"}, {rows_q, "total_q"}};
  return {{batch, "batch"}, {nheads, "nheads"}, {rows_q, "seqlen_q"}};
}

Status check_heads(int64_t nheads, int64_t nheads_k, const char* k_name) {
  if (nheads < 1) return invalid("q", "nheads >= 1", std::to_string(nheads));
  if (nheads_k < 1 || nheads % nheads_k != 0) {
    return invalid(k_name, "nheads_k dividing nheads=" + std::to_string(nheads),
                   std::to_string(nheads_k));
  }
  return Status::Ok();
}

Status check_total_q(const Sizes& sizes) {
  const int64_t rows = sizes.varlen ? sizes.rows_q : sizes.batch * sizes.rows_q;
  if (rows <= INT32_MAX) return Status::Ok();
  return invalid("q", "batch * seqlen_q <= 2^31-1 rows", std::to_string(rows));
}

Status check_head_dims(int64_t head_dim, int64_t head_dim_v, const char* v_name) {
  const auto range = [] { return "1.." + std::to_string(kMaxHeadDim); };
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return invalid("q", "head_dim in " + range(), std::to_string(head_dim));
  }
  if (head_dim_v < 1 || head_dim_v > kMaxHeadDim) {
    return invalid(v_name, "head_dim_v in " + range(), std::to_string(head_dim_v));
  }
  return Status::Ok();
}

Status expect_fp8_output_dtype(const Tensor& out, const char* name) {
  if (out.dtype == DType::kBF16 || out.dtype == DType::kF16) return Status::Ok();
  return invalid(name, "dtype bf16 or fp16 (the output of an e4m3 attention)",
                 to_string(out.dtype));
}

Status check_descales(const Descales& descale, bool q_e4m3, bool kv_e4m3, const Sizes& s) {
  const struct {
    const Tensor& tensor;
    const char* name;
    bool allowed;
    const char* operand;
  } factors[] = {{descale.q, "descale.q", q_e4m3, "q"},
                 {descale.k, "descale.k", kv_e4m3, "k"},
                 {descale.v, "descale.v", kv_e4m3, "v"}};
  for (const auto& f : factors) {
    if (!f.tensor.present()) continue;
    if (!f.allowed) {
      return invalid(f.name,
                     std::string("none: descales apply to e4m3 operands and ") + f.operand +
                         " is not e4m3",
                     "a tensor");
    }
    FA_RETURN_IF_ERROR(check_storage(f.tensor, f.name));
    FA_RETURN_IF_ERROR(expect_dtype(f.tensor, f.name, DType::kF32));
    const bool one = f.tensor.rank == 1 && f.tensor.shape[0] == 1;
    if (!one) {
      FA_RETURN_IF_ERROR(
          expect_shape(f.tensor, f.name, {{s.batch, "batch"}, {s.nheads_k, "nheads_k"}}));
    }
  }
  return Status::Ok();
}

void fill_descales(const Descales& descale, bool q_e4m3, bool kv_e4m3,
                   core::AttentionParams* p) {
  p->q_e4m3 = q_e4m3;
  p->kv_e4m3 = kv_e4m3;
  const auto factor = [](const Tensor& t) {
    core::Descale d;
    if (!t.present()) return d;
    d.ptr = static_cast<const float*>(t.data);
    if (t.rank == 2) {
      d.batch_stride = t.stride[0];
      d.head_stride = t.stride[1];
    }
    return d;
  };
  p->q_descale = factor(descale.q);
  p->k_descale = factor(descale.k);
  p->v_descale = factor(descale.v);
}

Status check_backend_support(DType dtype, const Sizes& sizes, const Target& target,
                             const char* v_name) {
  if (target.backend == Backend::kCuda && dtype == DType::kF32) {
    return unsupported("q",
                       "fp32 runs on the CPU backends only; Backend::kCuda takes fp16 or bf16");
  }
  if (sizes.head_dim_v != sizes.head_dim) {
    return unsupported(v_name, "head_dim_v=" + std::to_string(sizes.head_dim_v) +
                                   " different from head_dim=" + std::to_string(sizes.head_dim) +
                                   " is not supported yet");
  }
  return Status::Ok();
}

void fill_common(const Tensor& q, const Tensor& out, const Tensor& lse, const Sizes& sizes,
                 core::AttentionParams* params) {
  params->dtype = core::element_type(out.dtype);
  params->batch = static_cast<int>(sizes.batch);
  params->nheads = static_cast<int>(sizes.nheads);
  params->nheads_k = static_cast<int>(sizes.nheads_k);
  params->head_dim = static_cast<int>(sizes.head_dim);
  params->head_dim_v = static_cast<int>(sizes.head_dim_v);
  params->seqlen_q = static_cast<int>(sizes.seqlen_q);
  params->seqlen_k = static_cast<int>(sizes.seqlen_k);
  params->total_q = static_cast<int>(sizes.varlen ? sizes.rows_q : sizes.batch * sizes.rows_q);
  // cu_seqlens_k (int32) never reaches past 2^31 - 1 rows, whatever the tensor holds.
  constexpr int64_t kMaxRows = 2147483647;
  params->total_k = sizes.varlen ? static_cast<int>(std::min(sizes.rows_k, kMaxRows)) : 0;
  params->q = operand_of(q);
  params->out = operand_of(out);
  if (lse.present()) {
    params->lse = static_cast<float*>(lse.data);
    params->lse_batch_stride = sizes.varlen ? 0 : lse.stride[0];
    params->lse_head_stride = sizes.varlen ? lse.stride[0] : lse.stride[1];
  }
}

}  // namespace flashattn::api
