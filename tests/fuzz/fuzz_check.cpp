#include "fuzz_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

#include "api/checks.hpp"
#include "api/validate.hpp"
#include "core/numeric.hpp"
#include "cpu/reference.hpp"
#include "flashattn/flashattn.h"
#include "fuzz_instance.hpp"

namespace fa_fuzz {
namespace {

using flashattn::Status;
using flashattn::StatusCode;
using flashattn::Tensor;

// ---------------------------------------------------------------- calls ------------

fa_tensor to_c(const Tensor& t) {
  fa_tensor out;
  std::memset(&out, 0, sizeof out);
  out.data = t.data;
  // Any int32 may sit in a C enum field; memcpy writes it without an enum-typed store.
  const int32_t dtype = static_cast<int32_t>(t.dtype);
  const int32_t device = static_cast<int32_t>(t.device.type);
  std::memcpy(&out.dtype, &dtype, sizeof dtype);
  std::memcpy(&out.device_type, &device, sizeof device);
  out.device_index = t.device.index;
  out.rank = t.rank;
  for (int d = 0; d < FA_MAX_RANK; ++d) {
    out.shape[d] = t.shape[d];
    out.stride[d] = t.stride[d];
  }
  return out;
}

fa_options to_c(const flashattn::AttentionOptions& o) {
  fa_options out;
  std::memset(&out, 0, sizeof out);
  out.softmax_scale = o.softmax_scale ? *o.softmax_scale : NAN;
  out.causal = o.causal;
  out.window_left = o.window_left;
  out.window_right = o.window_right;
  out.softcap = o.softcap;
  out.alibi_slopes = to_c(o.alibi_slopes);
  out.dropout_p = o.dropout_p;
  out.dropout_seed = o.dropout_seed;
  out.dropout_offset = o.dropout_offset;
  return out;
}

fa_varlen to_c(const flashattn::VarlenLayout& v) {
  fa_varlen out;
  out.cu_seqlens_q = to_c(v.cu_seqlens_q);
  out.cu_seqlens_k = to_c(v.cu_seqlens_k);
  out.seqused_k = to_c(v.seqused_k);
  out.max_seqlen_q = v.max_seqlen_q;
  out.max_seqlen_k = v.max_seqlen_k;
  return out;
}

Status from_c(fa_status code) {
  if (code == FA_OK) return Status::Ok();
  return Status(static_cast<StatusCode>(code), fa_last_error_message());
}

// The call through the C ABI; `validate_only` asks fa_supported_* instead.
Status call_c(const Instance& in, bool validate_only) {
  fa_launch launch;
  fa_launch_init(&launch);
  const int32_t backend = static_cast<int32_t>(in.launch.backend);
  std::memcpy(&launch.backend, &backend, sizeof backend);
  fa_backend backend_field;
  std::memcpy(&backend_field, &backend, sizeof backend);
  switch (in.entry) {
    case Entry::kForward: {
      const flashattn::ForwardArgs& a = in.forward;
      fa_forward_args c;
      fa_forward_args_init(&c);
      c.q = to_c(a.q);
      c.k = to_c(a.k);
      c.v = to_c(a.v);
      c.out = to_c(a.out);
      c.lse = to_c(a.lse);
      c.varlen = to_c(a.varlen);
      c.options = to_c(a.options);
      c.descale = {to_c(a.descale.q), to_c(a.descale.k), to_c(a.descale.v)};
      c.dropout_seed_offset = a.options.dropout_seed_offset;
      return from_c(validate_only ? fa_supported_forward(&c, backend_field)
                                  : fa_forward(&c, &launch));
    }
    case Entry::kBackward: {
      const flashattn::BackwardArgs& a = in.backward;
      fa_backward_args c;
      fa_backward_args_init(&c);
      c.dout = to_c(a.dout);
      c.q = to_c(a.q);
      c.k = to_c(a.k);
      c.v = to_c(a.v);
      c.out = to_c(a.out);
      c.lse = to_c(a.lse);
      c.dq = to_c(a.dq);
      c.dk = to_c(a.dk);
      c.dv = to_c(a.dv);
      c.varlen = to_c(a.varlen);
      c.options = to_c(a.options);
      c.deterministic = a.deterministic;
      c.dropout_seed_offset = a.options.dropout_seed_offset;
      return from_c(validate_only ? fa_supported_backward(&c, backend_field)
                                  : fa_backward(&c, &launch));
    }
    case Entry::kKVCache: {
      const flashattn::KVCacheArgs& a = in.kvcache;
      fa_kvcache_args c;
      fa_kvcache_args_init(&c);
      c.q = to_c(a.q);
      c.k_cache = to_c(a.k_cache);
      c.v_cache = to_c(a.v_cache);
      c.cache_seqlens = to_c(a.cache_seqlens);
      c.k_new = to_c(a.k_new);
      c.v_new = to_c(a.v_new);
      c.block_table = to_c(a.block_table);
      c.cache_batch_idx = to_c(a.cache_batch_idx);
      c.cache_leftpad = to_c(a.cache_leftpad);
      c.rotary_cos = to_c(a.rotary_cos);
      c.rotary_sin = to_c(a.rotary_sin);
      c.rotary_interleaved = a.rotary_interleaved;
      c.num_splits = a.num_splits;
      c.out = to_c(a.out);
      c.lse = to_c(a.lse);
      c.options = to_c(a.options);
      c.descale = {to_c(a.descale.q), to_c(a.descale.k), to_c(a.descale.v)};
      return from_c(validate_only ? fa_supported_kvcache(&c, backend_field)
                                  : fa_forward_kvcache(&c, &launch));
    }
  }
  return Status(StatusCode::kInternal, "fuzz: unknown entry");
}

Status call_cpp(const Instance& in, bool validate_only) {
  switch (in.entry) {
    case Entry::kForward:
      return validate_only ? flashattn::supported(in.forward, in.launch.backend)
                           : flashattn::forward(in.forward, in.launch);
    case Entry::kBackward:
      return validate_only ? flashattn::supported(in.backward, in.launch.backend)
                           : flashattn::backward(in.backward, in.launch);
    case Entry::kKVCache:
      return validate_only ? flashattn::supported(in.kvcache, in.launch.backend)
                           : flashattn::forward_kvcache(in.kvcache, in.launch);
  }
  return Status(StatusCode::kInternal, "fuzz: unknown entry");
}

// The reference in one precision, over the same validation as the public API.
Status call_reference(Instance* in, flashattn::cpu::ReferencePrecision precision) {
  namespace api = flashattn::api;
  const api::Target target{flashattn::Backend::kReference, flashattn::Device{}, false};
  switch (in->entry) {
    case Entry::kForward: {
      flashattn::core::AttentionParams p;
      FA_RETURN_IF_ERROR(api::validate_forward(in->forward, target, &p));
      return flashattn::cpu::reference_forward(p, precision);
    }
    case Entry::kBackward: {
      flashattn::core::BackwardParams p;
      FA_RETURN_IF_ERROR(api::validate_backward(in->backward, target, &p));
      return flashattn::cpu::reference_backward(p, precision);
    }
    case Entry::kKVCache: {
      flashattn::core::KVCacheParams p;
      FA_RETURN_IF_ERROR(api::validate_kvcache(in->kvcache, target, &p));
      return flashattn::cpu::reference_forward_kvcache(p, precision);
    }
  }
  return Status(StatusCode::kInternal, "fuzz: unknown entry");
}

// ---------------------------------------------------------------- checks -----------

// The names an error message may start with: every argument of the call.
bool names_an_argument(const std::string& message, Entry entry) {
  static const std::set<std::string> others = {"args",
                                               "bytes",
                                               "backend cuda",
                                               "launch.backend",
                                               "launch.workspace",
                                               "launch.workspace_bytes",
                                               "options.softmax_scale",
                                               "options.window_left",
                                               "options.window_right",
                                               "options.softcap",
                                               "options.dropout_p",
                                               "options.dropout_seed_offset",
                                               "varlen.max_seqlen_q",
                                               "varlen.max_seqlen_k",
                                               "num_splits"};
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return false;
  const std::string name = message.substr(0, colon);
  if (others.count(name) != 0) return true;
  for (int s = 0; s < kSlotCount; ++s) {
    if (name == slot_name(static_cast<Slot>(s), entry)) return true;
  }
  return false;
}

std::string first_changed_buffer(const std::vector<std::vector<uint8_t>>& before,
                                 const Instance& in, bool outputs_too) {
  for (int s = 0; s < kSlotCount; ++s) {
    if (!outputs_too && in.buffers[s].output) continue;
    if (before[s] != in.buffers[s].bytes) return slot_name(static_cast<Slot>(s), in.entry);
  }
  return "";
}

// Guard bytes and the bytes of an output's span that are not its elements: unchanged.
std::string output_outside_view_changed(const std::vector<std::vector<uint8_t>>& before,
                                        const Instance& in) {
  for (int s = 0; s < kSlotCount; ++s) {
    const Buffer& buffer = in.buffers[s];
    if (!buffer.output || buffer.bytes.empty()) continue;
    const Tensor& t = *in.slot(static_cast<Slot>(s));
    std::vector<bool> inside(buffer.bytes.size(), false);
    const size_t size = flashattn::dtype_size(t.dtype);
    const auto* base = static_cast<const uint8_t*>(t.data);
    if (base != nullptr && size != 0) {
      const size_t start = static_cast<size_t>(base - buffer.bytes.data());
      for (int64_t offset : element_offsets(t)) {
        for (size_t b = 0; b < size; ++b) inside[start + offset * size + b] = true;
      }
    }
    for (size_t b = 0; b < buffer.bytes.size(); ++b) {
      if (!inside[b] && buffer.bytes[b] != before[s][b]) {
        return std::string(slot_name(static_cast<Slot>(s), in.entry)) + " byte " +
               std::to_string(b) + " outside its elements";
      }
    }
  }
  return "";
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> values;
  const auto type = flashattn::core::element_type(t.dtype);
  for (int64_t offset : element_offsets(t)) {
    values.push_back(flashattn::core::load_element(t.data, offset, type));
  }
  return values;
}

double unit_roundoff(flashattn::DType dtype) {
  if (dtype == flashattn::DType::kF16) return std::ldexp(1.0, -11);
  if (dtype == flashattn::DType::kBF16) return std::ldexp(1.0, -8);
  if (dtype == flashattn::DType::kF8E4M3) return std::ldexp(1.0, -4);
  return std::ldexp(1.0, -24);
}

// FA2's rule on one output, and the same elements non-finite as the exact reference.
std::string compare_output(const char* name, const std::vector<double>& got,
                           const std::vector<double>& exact, const std::vector<double>& lowp,
                           flashattn::DType dtype, double logits) {
  double error = 0, baseline = 0, magnitude = 1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(got[i]) != std::isfinite(exact[i])) {
      std::ostringstream text;
      text << name << "[" << i << "] = " << got[i] << " where the reference has " << exact[i];
      return text.str();
    }
    if (!std::isfinite(exact[i])) continue;
    error = std::max(error, std::fabs(got[i] - exact[i]));
    if (std::isfinite(lowp[i])) baseline = std::max(baseline, std::fabs(lowp[i] - exact[i]));
    magnitude = std::max(magnitude, std::fabs(exact[i]));
  }
  // eps: 16 roundoffs at the result's magnitude, times the size of the logits. The tests'
  // problems use 2 roundoffs (their sizes are chosen); random ones include fp32 problems
  // whose naive baseline is a single ulp, where a tiled summation order alone takes a few,
  // and split-KV merges weigh partial results by exp(lse_split - lse), whose rounding
  // grows with |lse| (the naive algorithm has no such step).
  const double bound = 2 * baseline + 16 * unit_roundoff(dtype) * magnitude * logits;
  if (error <= bound) return "";
  std::ostringstream text;
  text << name << ": max|cpu - reference| = " << error << " > 2 * " << baseline
       << " + eps = " << bound;
  return text.str();
}

// The largest finite Euclidean norm among the rows (last dimension) of a view.
double largest_row_norm(const Tensor& t) {
  if (!t.present() || t.data == nullptr || t.rank < 1) return 0;
  const std::vector<double> values = values_of(t);
  const int64_t width = t.shape[t.rank - 1];
  double largest = 0;
  for (size_t row = 0; width > 0 && row + width <= values.size(); row += width) {
    double sum = 0;
    for (int64_t i = 0; i < width; ++i) sum += values[row + i] * values[row + i];
    if (std::isfinite(sum)) largest = std::max(largest, std::sqrt(sum));
  }
  return largest;
}

// The size of the scores' rounding: scale * |q| * |k| (Cauchy-Schwarz), plus the largest
// ALiBi bias the sequence lengths allow. Not capped by a softcap: the cap bounds the scores,
// but the dot product's rounding, up to scale * |q| * |k| times the unit roundoff whatever
// the dot product's own size, reaches the capped score through tanh' <= 1 where tanh is not
// saturated.
double score_bound(const Instance& in) {
  const flashattn::AttentionOptions& o = in.entry == Entry::kForward    ? in.forward.options
                                         : in.entry == Entry::kBackward ? in.backward.options
                                                                        : in.kvcache.options;
  const Tensor& q = *in.slot(kQ);
  if (!q.present() || q.rank < 1) return 0;
  const int64_t head_dim = q.shape[q.rank - 1];
  const double scale = o.softmax_scale && std::isfinite(*o.softmax_scale)
                           ? std::fabs(*o.softmax_scale)
                           : 1 / std::sqrt(static_cast<double>(std::max<int64_t>(head_dim, 1)));
  // An FP8 operand is read as x * descale: the largest factor scales its norm.
  const auto largest_factor = [](const Tensor& t) {
    double largest = 1;
    if (!t.present() || t.data == nullptr) return largest;
    for (double x : values_of(t)) {
      if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
    }
    return largest;
  };
  double keys = largest_row_norm(*in.slot(kK)) * largest_factor(*in.slot(kKDescale));
  if (in.entry == Entry::kKVCache) keys = std::max(keys, largest_row_norm(*in.slot(kKNew)));
  double bound = scale * largest_row_norm(q) * largest_factor(*in.slot(kQDescale)) * keys;
  const Tensor& alibi = *in.slot(kAlibi);
  if (alibi.present() && alibi.data != nullptr) {
    double slope = 0;
    for (double x : values_of(alibi)) {
      if (std::isfinite(x)) slope = std::max(slope, std::fabs(x));
    }
    int64_t span = 0;
    for (Slot s : {kQ, kK, kKNew}) {
      const Tensor& t = *in.slot(s);
      for (int d = 0; t.present() && d + 1 < t.rank; ++d) span = std::max(span, t.shape[d]);
    }
    bound += slope * static_cast<double>(span);
  }
  return std::isfinite(bound) ? bound : 0;
}

// An output view whose elements share memory (a zero or too small stride): which write
// lands last is not part of the contract, so only memory safety is checked there.
bool overlaps_itself(const Tensor& t) {
  std::vector<int64_t> offsets = element_offsets(t);
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

// A softmax scale or softcap mutated to an edge value (hundreds and up) makes logits of
// thousands, where one fp32 rounding of a score moves P by more than the tolerance rule's
// yardstick allows for: such calls are checked for validity and memory only.
bool extreme_logits(const Case& c) {
  for (const Mutation& m : c.mutations) {
    if (m.kind == MutationKind::kOption && (m.dim == 0 || m.dim == 3) &&
        (m.value > 16 || m.value < -16)) {
      return true;
    }
  }
  return false;
}

std::string compare_with_reference(const Case& c, const Instance& tested) {
  if (extreme_logits(c)) return "";
  for (int s = 0; s < kSlotCount; ++s) {
    // The backward's out and lse were written by a forward too (materialize), in an order
    // that differs from run to run where the view overlaps itself.
    const bool written =
        tested.buffers[s].output || (tested.entry == Entry::kBackward && (s == kOut || s == kLse));
    if (written && overlaps_itself(*tested.slot(static_cast<Slot>(s)))) return "";
  }
  Instance exact = materialize(c, flashattn::Backend::kReference);
  Instance lowp = materialize(c, flashattn::Backend::kReference);
  if (c.c_abi) {
    // The C ABI reads a NaN softmax_scale as "unset" (flashattn.h); the reference is
    // called through the C++ API, where unset is std::nullopt. fa_kvcache_args has no
    // dropout_seed_offset (a KV-cache call has no dropout), so the C call never passes one.
    for (Instance* in : {&exact, &lowp}) {
      flashattn::AttentionOptions& o = in->entry == Entry::kForward    ? in->forward.options
                                       : in->entry == Entry::kBackward ? in->backward.options
                                                                       : in->kvcache.options;
      if (o.softmax_scale && std::isnan(*o.softmax_scale)) o.softmax_scale.reset();
      if (in->entry == Entry::kKVCache) o.dropout_seed_offset = nullptr;
    }
  }
  const Status exact_status = call_reference(&exact, flashattn::cpu::ReferencePrecision::kExact);
  if (!exact_status.ok())
    return "accepted, but the reference rejects it: " + exact_status.message();
  const Status lowp_status =
      call_reference(&lowp, flashattn::cpu::ReferencePrecision::kLowPrecisionNaive);
  if (!lowp_status.ok()) return "the low-precision reference failed: " + lowp_status.message();
  // The logits' size: the largest finite |lse| of the exact reference when the call has
  // an lse, else a generous bound for the options the generator picks; and never below
  // the scores' own bound, since a row whose lse is small can still hold large scores of
  // both signs (the gradients' rounding follows the scores, not their logsumexp).
  double logits = 1;
  const Tensor& lse = *exact.slot(kLse);
  if (lse.present() && lse.data != nullptr) {
    for (double x : values_of(lse)) {
      if (std::isfinite(x)) logits = std::max(logits, std::fabs(x));
    }
  } else {
    logits = 64;
  }
  logits = std::max(logits, score_bound(exact));
  for (int s = 0; s < kSlotCount; ++s) {
    if (!tested.buffers[s].output) continue;
    const Slot slot = static_cast<Slot>(s);
    const std::string failure = compare_output(
        slot_name(slot, tested.entry), values_of(*tested.slot(slot)), values_of(*exact.slot(slot)),
        values_of(*lowp.slot(slot)), tested.slot(kQ)->dtype, logits);
    if (!failure.empty()) return failure;
  }
  return "";
}

}  // namespace

Result run_case(const Case& c) {
  Result result;
  Instance in = materialize(c, flashattn::Backend::kCpu);
  if (in.index_unbacked) return result;  // kSkipped
  const auto before = in.snapshot();
  const bool validate_only = !in.backed;
  const Status status = c.c_abi ? call_c(in, validate_only) : call_cpp(in, validate_only);
  if (!status.ok()) {
    result.outcome = Outcome::kRejected;
    if (status.code() != StatusCode::kInvalidArgument &&
        status.code() != StatusCode::kUnsupported) {
      result.failure = std::string("rejected with ") + flashattn::to_string(status.code()) + ": " +
                       status.message();
    } else if (!names_an_argument(status.message(), in.entry)) {
      result.failure = "the message does not start with an argument's name: " + status.message();
    } else if (const std::string changed = first_changed_buffer(before, in, true);
               !changed.empty()) {
      result.failure = "rejected (" + status.message() + "), but " + changed + " changed";
    }
    return result;
  }
  if (validate_only) {
    result.outcome = Outcome::kValidatedOnly;
    return result;
  }
  result.outcome = Outcome::kAccepted;
  if (const std::string changed = first_changed_buffer(before, in, false); !changed.empty()) {
    result.failure = "the input " + changed + " changed";
  } else if (const std::string outside = output_outside_view_changed(before, in);
             !outside.empty()) {
    result.failure = "wrote " + outside;
  } else {
    result.failure = compare_with_reference(c, in);
  }
  return result;
}

}  // namespace fa_fuzz
