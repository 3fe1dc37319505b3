#include "support/reference_problem.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

namespace fa_test {
namespace {

using flashattn::Status;
using flashattn::cpu::ReferencePrecision;

int sum_of(const std::vector<int>& values) {
  return std::accumulate(values.begin(), values.end(), 0);
}

int max_of(const std::vector<int>& values) {
  return values.empty() ? 0 : *std::max_element(values.begin(), values.end());
}

HostTensor cumulative(const std::vector<int>& lengths) {
  std::vector<int32_t> offsets(1, 0);
  for (int n : lengths) offsets.push_back(offsets.back() + n);
  return int32_tensor(offsets);
}

// A [.., heads, dim] tensor of the problem's dtype; strided problems get a view whose head
// stride skips 2 * heads extra heads, as a slice of a packed qkv buffer would.
HostTensor head_tensor(const Problem& problem, std::vector<int64_t> shape) {
  const int heads_dim = static_cast<int>(shape.size()) - 2;
  if (!problem.strided) return HostTensor(problem.dtype, shape);
  return HostTensor::strided(problem.dtype, shape, heads_dim, 2 * shape[heads_dim]);
}

// [b, s, h, d] for dense problems, [total, h, d] for varlen ones.
std::vector<int64_t> rows_shape(const Problem& problem, int seqlen, int total, int heads,
                                int dim) {
  if (problem.varlen()) return {total, heads, dim};
  return {problem.batch, seqlen, heads, dim};
}

void fill_random(HostTensor* t, const Problem& problem, std::mt19937& rng) {
  if (problem.distribution == Distribution::kNormal) {
    t->fill_normal(rng, problem.input_scale);
  } else {
    t->fill_uniform(rng, -problem.input_scale, problem.input_scale);
  }
}

Status labelled(const Status& status, const std::string& who) {
  if (status.ok()) return status;
  return Status(status.code(), who + ": " + status.message());
}

struct Runs {
  Inputs inputs;
  Outputs tested, exact, lowp;
};

// The forward of the runner, the exact and the low-precision reference; false (and the
// status in `result`) when one of them fails.
bool run_forwards(const Problem& problem, const Runner& runner, Runs* runs,
                  CheckResult* result) {
  result->problem = problem.describe() + " on " + runner.name;
  runs->inputs = make_inputs(problem);
  runs->tested = make_outputs(problem);
  runs->exact = make_outputs(problem);
  runs->lowp = make_outputs(problem);
  result->status = runner.forward(forward_args(problem, runs->inputs, &runs->tested));
  if (!result->status.ok()) return false;
  const Runner exact = reference_runner(ReferencePrecision::kExact);
  const Runner lowp = reference_runner(ReferencePrecision::kLowPrecisionNaive);
  result->status = labelled(exact.forward(forward_args(problem, runs->inputs, &runs->exact)),
                            exact.name);
  if (!result->status.ok()) return false;
  result->status =
      labelled(lowp.forward(forward_args(problem, runs->inputs, &runs->lowp)), lowp.name);
  return result->status.ok();
}

void compare_forward(const Problem& problem, const Runs& runs, CheckResult* result) {
  compare(result, "out", runs.tested.out, runs.exact.out, runs.lowp.out,
          tolerance_eps(problem.out_type(), runs.exact.out, problem.eps_scale));
  // lse is fp32 whatever the inputs; a kernel's online softmax may lose a few more ulps
  // than the naive sum. FP8 scores come from tensor cores that sum e4m3 products in fewer bits
  // than fp32 (about 14, truncated, as DeepSeek-V3 measured on Hopper), step after step along
  // the head dim; an H200 moved the lse by about 2^-11 of the largest |lse| (d = 128), so the
  // eps for FP8 is 2^-9 of it (16384 ulps of fp32, doubled by tolerance_eps).
  const double lse_ulps = problem.fp8() ? 16384 : 64;
  compare(result, "lse", runs.tested.lse, runs.exact.lse, runs.lowp.lse,
          tolerance_eps(DType::kF32, runs.exact.lse, lse_ulps * problem.eps_scale));
}

}  // namespace

int Problem::sequences() const { return varlen() ? static_cast<int>(seqlens_q.size()) : batch; }
int Problem::total_q() const { return varlen() ? sum_of(seqlens_q) : batch * seqlen_q; }
int Problem::total_k() const { return varlen() ? sum_of(seqlens_k) : batch * seqlen_k; }
int Problem::max_seqlen_q() const { return varlen() ? max_of(seqlens_q) : seqlen_q; }
int Problem::max_seqlen_k() const { return varlen() ? max_of(seqlens_k) : seqlen_k; }

int Problem::q_row0(int b) const {
  return varlen() ? std::accumulate(seqlens_q.begin(), seqlens_q.begin() + b, 0) : 0;
}
int Problem::k_row0(int b) const {
  return varlen() ? std::accumulate(seqlens_k.begin(), seqlens_k.begin() + b, 0) : 0;
}
int Problem::seqlen_q_of(int b) const { return varlen() ? seqlens_q[b] : seqlen_q; }
int Problem::keys_of(int b) const {
  if (!seqused_k.empty()) return seqused_k[b];
  return varlen() ? seqlens_k[b] : seqlen_k;
}

std::string Problem::describe() const {
  std::ostringstream text;
  text << flashattn::to_string(dtype) << " h=" << nheads << "/" << nheads_k << " d=" << head_dim;
  if (fp8()) {
    text << " out=" << flashattn::to_string(out_dtype)
         << (descales == Descales::kNone     ? " no descales"
             : descales == Descales::kOne ? " one descale each"
                                          : " descales[b,hk]");
  }
  if (dim_v() != head_dim) text << "/" << dim_v();
  if (varlen()) {
    text << " varlen q[";
    for (int n : seqlens_q) text << n << " ";
    text << "] k[";
    for (int n : seqlens_k) text << n << " ";
    text << "]";
    if (!seqused_k.empty()) text << " seqused_k";
  } else {
    text << " b=" << batch << " sq=" << seqlen_q << " sk=" << seqlen_k;
  }
  if (causal) text << " causal";
  if (window_left >= 0 || window_right >= 0) {
    text << " window(" << window_left << "," << window_right << ")";
  }
  if (softcap > 0) text << " softcap=" << softcap;
  if (alibi) text << (alibi_per_batch ? " alibi[b,h]" : " alibi[h]");
  if (dropout_p > 0) text << " dropout=" << dropout_p;
  if (softmax_scale != 0) text << " scale=" << softmax_scale;
  if (zero_scale) text << " scale=0";
  if (strided) text << " strided";
  text << (distribution == Distribution::kNormal ? " normal" : " uniform") << "*" << input_scale
       << " seed=" << seed;
  return text.str();
}

Inputs make_inputs(const Problem& p) {
  std::mt19937 rng(p.seed);
  Inputs in;
  in.q = head_tensor(p, rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.head_dim));
  in.k = head_tensor(p, rows_shape(p, p.seqlen_k, p.total_k(), p.nheads_k, p.head_dim));
  in.v = head_tensor(p, rows_shape(p, p.seqlen_k, p.total_k(), p.nheads_k, p.dim_v()));
  in.dout = head_tensor(p, rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.dim_v()));
  for (HostTensor* t : {&in.q, &in.k, &in.v}) fill_random(t, p, rng);
  if (p.fp8()) {
    in.dout = HostTensor(p.out_type(), rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.dim_v()));
    if (p.descales != Problem::Descales::kNone) {
      const std::vector<int64_t> shape =
          p.descales == Problem::Descales::kOne ? std::vector<int64_t>{1}
                                                : std::vector<int64_t>{p.sequences(), p.nheads_k};
      for (HostTensor* t : {&in.q_descale, &in.k_descale, &in.v_descale}) {
        *t = HostTensor(DType::kF32, shape);
        t->fill_uniform(rng, 0.25f, 2.f);
      }
    }
  }
  fill_random(&in.dout, p, rng);
  if (p.alibi) {
    in.alibi_slopes = p.alibi_per_batch ? HostTensor(DType::kF32, {p.sequences(), p.nheads})
                                        : HostTensor(DType::kF32, {p.nheads});
    in.alibi_slopes.fill_uniform(rng, 0.f, 0.5f);
  }
  if (p.varlen()) {
    in.cu_seqlens_q = cumulative(p.seqlens_q);
    in.cu_seqlens_k = cumulative(p.seqlens_k);
    if (!p.seqused_k.empty()) {
      in.seqused_k = int32_tensor(std::vector<int32_t>(p.seqused_k.begin(), p.seqused_k.end()));
    }
  }
  return in;
}

Outputs make_outputs(const Problem& p) {
  Outputs o;
  o.out = p.fp8() ? HostTensor(p.out_type(), rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.dim_v()))
                  : head_tensor(p, rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.dim_v()));
  o.lse = p.varlen() ? HostTensor(DType::kF32, {p.nheads, p.total_q()})
                     : HostTensor(DType::kF32, {p.batch, p.nheads, p.seqlen_q});
  o.dq = head_tensor(p, rows_shape(p, p.seqlen_q, p.total_q(), p.nheads, p.head_dim));
  o.dk = head_tensor(p, rows_shape(p, p.seqlen_k, p.total_k(), p.nheads_k, p.head_dim));
  o.dv = head_tensor(p, rows_shape(p, p.seqlen_k, p.total_k(), p.nheads_k, p.dim_v()));
  for (HostTensor* t : {&o.out, &o.lse, &o.dq, &o.dk, &o.dv}) t->poison();
  return o;
}

Problem dense_sequence(const Problem& varlen, int b) {
  Problem dense = varlen;
  dense.seqlens_q.clear();
  dense.seqlens_k.clear();
  dense.seqused_k.clear();
  dense.batch = 1;
  dense.seqlen_q = varlen.seqlen_q_of(b);
  dense.seqlen_k = varlen.keys_of(b);
  return dense;
}

Inputs dense_sequence_inputs(const Problem& varlen, const Inputs& packed, int b) {
  const Problem dense = dense_sequence(varlen, b);
  Inputs in = make_inputs(dense);
  const auto cut = [](const HostTensor& from, int64_t row0, HostTensor* to) {
    const int64_t row_elements = to->size(2) * to->size(3);
    for (int64_t n = 0; n < to->numel(); ++n) to->set(n, from.get(row0 * row_elements + n));
  };
  cut(packed.q, varlen.q_row0(b), &in.q);
  cut(packed.dout, varlen.q_row0(b), &in.dout);
  cut(packed.k, varlen.k_row0(b), &in.k);
  cut(packed.v, varlen.k_row0(b), &in.v);
  if (varlen.alibi) {
    const int64_t first = varlen.alibi_per_batch ? int64_t(b) * varlen.nheads : 0;
    for (int h = 0; h < varlen.nheads; ++h) in.alibi_slopes.set(h, packed.alibi_slopes.get(first + h));
  }
  return in;
}

flashattn::AttentionOptions attention_options(const Problem& p, const Inputs& in) {
  flashattn::AttentionOptions o;
  if (p.softmax_scale != 0.f) o.softmax_scale = p.softmax_scale;
  if (p.zero_scale) o.softmax_scale = 0.f;
  o.causal = p.causal;
  o.window_left = p.window_left;
  o.window_right = p.window_right;
  o.softcap = p.softcap;
  if (p.alibi) o.alibi_slopes = in.alibi_slopes.view();
  o.dropout_p = p.dropout_p;
  o.dropout_seed = p.dropout_seed;
  o.dropout_offset = p.dropout_offset;
  return o;
}

flashattn::VarlenLayout varlen_layout(const Problem& p, const Inputs& in) {
  flashattn::VarlenLayout layout;
  if (!p.varlen()) return layout;
  layout.cu_seqlens_q = in.cu_seqlens_q.view();
  layout.cu_seqlens_k = in.cu_seqlens_k.view();
  if (!p.seqused_k.empty()) layout.seqused_k = in.seqused_k.view();
  layout.max_seqlen_q = p.max_seqlen_q();
  layout.max_seqlen_k = p.max_seqlen_k();
  return layout;
}

flashattn::ForwardArgs forward_args(const Problem& p, const Inputs& in, Outputs* out) {
  flashattn::ForwardArgs args;
  args.q = in.q.view();
  args.k = in.k.view();
  args.v = in.v.view();
  args.out = out->out.view();
  args.lse = out->lse.view();
  args.varlen = varlen_layout(p, in);
  args.options = attention_options(p, in);
  args.descale = {in.q_descale.view(), in.k_descale.view(), in.v_descale.view()};
  return args;
}

flashattn::BackwardArgs backward_args(const Problem& p, const Inputs& in, Outputs* out) {
  flashattn::BackwardArgs args;
  args.dout = in.dout.view();
  args.q = in.q.view();
  args.k = in.k.view();
  args.v = in.v.view();
  args.out = out->out.view();
  args.lse = out->lse.view();
  args.dq = out->dq.view();
  args.dk = out->dk.view();
  args.dv = out->dv.view();
  args.varlen = varlen_layout(p, in);
  args.options = attention_options(p, in);
  return args;
}

CheckResult check_forward(const Problem& problem, const Runner& runner) {
  CheckResult result;
  Runs runs;
  if (run_forwards(problem, runner, &runs, &result)) compare_forward(problem, runs, &result);
  return result;
}

CheckResult check_backward(const Problem& problem, const Runner& runner) {
  CheckResult result;
  Runs runs;
  if (!run_forwards(problem, runner, &runs, &result)) return result;
  compare_forward(problem, runs, &result);

  result.status = runner.backward(backward_args(problem, runs.inputs, &runs.tested));
  if (!result.status.ok()) return result;
  const Runner exact = reference_runner(ReferencePrecision::kExact);
  const Runner lowp = reference_runner(ReferencePrecision::kLowPrecisionNaive);
  result.status = labelled(exact.backward(backward_args(problem, runs.inputs, &runs.exact)),
                           exact.name);
  if (!result.status.ok()) return result;
  result.status =
      labelled(lowp.backward(backward_args(problem, runs.inputs, &runs.lowp)), lowp.name);
  if (!result.status.ok()) return result;
  const auto compare_gradient = [&](const char* name, const HostTensor Outputs::*member) {
    compare(&result, name, runs.tested.*member, runs.exact.*member, runs.lowp.*member,
            tolerance_eps(problem.dtype, runs.exact.*member, problem.eps_scale));
  };
  compare_gradient("dq", &Outputs::dq);
  compare_gradient("dk", &Outputs::dk);
  compare_gradient("dv", &Outputs::dv);
  return result;
}

}  // namespace fa_test
