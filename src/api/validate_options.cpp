// AttentionOptions: scale, window/causal, softcap, dropout, ALiBi (docs/contract.md steps 1-6).
#include <cmath>

#include "api/validate_parts.hpp"
#include "core/philox.hpp"

namespace flashattn::api {
namespace {

constexpr double kLog2e = 1.4426950408889634;

Status check_window(const AttentionOptions& o) {
  if (o.window_left < -1) {
    return invalid("options.window_left", ">= -1 (-1: unbounded)", std::to_string(o.window_left));
  }
  if (o.window_right < -1) {
    return invalid("options.window_right", ">= -1 (-1: unbounded)", std::to_string(o.window_right));
  }
  // causal is right = 0: a wider right window contradicts it. -1 and 0 agree with it.
  if (o.causal && o.window_right > 0) {
    return invalid("options.window_right",
                   "0 or -1 with options.causal=true (causal is window_right=0)",
                   std::to_string(o.window_right));
  }
  return Status::Ok();
}

Status check_alibi(const Tensor& slopes, const Sizes& s) {
  if (!slopes.present()) return Status::Ok();
  const char* name = "options.alibi_slopes";
  FA_RETURN_IF_ERROR(check_storage(slopes, name));
  FA_RETURN_IF_ERROR(expect_dtype(slopes, name, DType::kF32));
  const Shape shared = {{s.nheads, "nheads"}};
  const Shape per_batch = {{s.batch, "batch"}, {s.nheads, "nheads"}};
  if (expect_shape(slopes, name, shared).ok() || expect_shape(slopes, name, per_batch).ok()) {
    return Status::Ok();
  }
  return invalid(name, "shape " + shape_text(shared) + " or " + shape_text(per_batch),
                 shape_text(slopes));
}

}  // namespace

Status check_options(const AttentionOptions& o, const Sizes& sizes) {
  if (o.softmax_scale && !std::isfinite(*o.softmax_scale)) {
    return invalid("options.softmax_scale", "a finite value (unset: 1/sqrt(head_dim))",
                   to_text(*o.softmax_scale));
  }
  FA_RETURN_IF_ERROR(check_window(o));
  if (!(o.softcap >= 0.f) || !std::isfinite(o.softcap)) {
    return invalid("options.softcap", "a finite value >= 0 (0: off)", to_text(o.softcap));
  }
  if (!(o.dropout_p >= 0.f && o.dropout_p < 1.f)) {
    return invalid("options.dropout_p", "a probability in [0, 1)", to_text(o.dropout_p));
  }
  if (o.dropout_seed_offset != nullptr && o.dropout_p == 0.f) {
    return invalid("options.dropout_seed_offset", "nullptr without dropout (dropout_p = 0)",
                   "a pointer");
  }
  return check_alibi(o.alibi_slopes, sizes);
}

void fill_options(const AttentionOptions& o, const Sizes& sizes, core::AttentionParams* p) {
  const double scale = o.softmax_scale
                           ? *o.softmax_scale
                           : 1.0 / std::sqrt(static_cast<double>(sizes.head_dim));
  p->scale = static_cast<float>(scale);
  p->scale_log2 = static_cast<float>(scale * kLog2e);
  p->softcap = o.softcap;
  p->window_left = o.window_left;
  p->window_right = o.causal ? 0 : o.window_right;
  p->dropout_p = o.dropout_p;
  p->drop_threshold = core::dropout_threshold(o.dropout_p);
  p->dropout_rescale = static_cast<float>(1.0 / (1.0 - static_cast<double>(o.dropout_p)));
  p->seed = o.dropout_seed;
  p->offset = o.dropout_offset;
  p->seed_offset = o.dropout_seed_offset;
  if (o.alibi_slopes.present()) {
    p->alibi_slopes = static_cast<const float*>(o.alibi_slopes.data);
    p->alibi_batch_stride = o.alibi_slopes.rank == 2 ? o.alibi_slopes.stride[0] : 0;
  }
}

}  // namespace flashattn::api
