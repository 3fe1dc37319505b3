#include "support/kvcache_problem.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

namespace fa_test {
namespace {

using flashattn::Status;
using flashattn::cpu::ReferencePrecision;

void fill_random(HostTensor* t, const KVCacheProblem& problem, std::mt19937& rng) {
  if (problem.distribution == Distribution::kNormal) {
    t->fill_normal(rng, problem.input_scale);
  } else {
    t->fill_uniform(rng, -problem.input_scale, problem.input_scale);
  }
}

std::vector<int32_t> shuffled_range(int n, std::mt19937& rng) {
  std::vector<int32_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 0);
  std::shuffle(values.begin(), values.end(), rng);
  return values;
}

// cos/sin of position * 10000^(-2i / rotary_dim), the usual rotary frequencies.
void fill_rotary_tables(const KVCacheProblem& p, KVCacheInputs* in) {
  const int rows = p.capacity() + p.seqlen_q;
  const int half = p.rotary_dim / 2;
  in->rotary_cos = HostTensor(p.dtype, {rows, half});
  in->rotary_sin = HostTensor(p.dtype, {rows, half});
  for (int position = 0; position < rows; ++position) {
    for (int i = 0; i < half; ++i) {
      const double angle = position * std::pow(10000.0, -2.0 * i / p.rotary_dim);
      in->rotary_cos.set(int64_t(position) * half + i, static_cast<float>(std::cos(angle)));
      in->rotary_sin.set(int64_t(position) * half + i, static_cast<float>(std::sin(angle)));
    }
  }
}

// Cache contents drawn in logical (batch entry, position, head, dim) order, which is the
// storage order of a contiguous cache, so a paged cache of the same seed holds the same
// sequences as the contiguous one.
void fill_caches(const KVCacheProblem& p, KVCacheInputs* in, std::mt19937& rng) {
  if (!p.paged()) {
    fill_random(&in->k_cache, p, rng);
    fill_random(&in->v_cache, p, rng);
    return;
  }
  for (HostTensor* cache : {&in->k_cache, &in->v_cache}) {
    // One distribution per tensor, as fill_random uses.
    std::normal_distribution<float> normal(0.f, p.input_scale);
    std::uniform_real_distribution<float> uniform(-p.input_scale, p.input_scale);
    for (int b = 0; b < p.batch; ++b) {
      for (int position = 0; position < p.capacity(); ++position) {
        for (int h = 0; h < p.nheads_k; ++h) {
          for (int c = 0; c < p.head_dim; ++c) {
            const float value =
                p.distribution == Distribution::kNormal ? normal(rng) : uniform(rng);
            cache->set(cache_index(p, *in, b, position, h, c), value);
          }
        }
      }
    }
  }
}

Status labelled(const Status& status, const std::string& who) {
  if (status.ok()) return status;
  return Status(status.code(), who + ": " + status.message());
}

}  // namespace

int KVCacheProblem::capacity() const {
  return paged() ? pages_per_row() * page_size : seqlen_cache;
}

int KVCacheProblem::batch_cache() const { return cache_batch_idx ? batch + 1 : batch; }

int KVCacheProblem::pages_per_row() const {
  return paged() ? (seqlen_cache + page_size - 1) / page_size : 0;
}

std::string KVCacheProblem::describe() const {
  std::ostringstream text;
  text << "kvcache " << flashattn::to_string(dtype);
  if (fp8_cache) text << (one_descale ? " e4m3 cache, one descale" : " e4m3 cache");
  text << " b=" << batch << " h=" << nheads << "/"
       << nheads_k << " d=" << head_dim << " sq=" << seqlen_q << " cache=" << seqlen_cache;
  if (!cache_seqlens.empty()) {
    text << " seqlens[";
    for (int n : cache_seqlens) text << n << " ";
    text << "]";
  }
  if (seqlen_new > 0) text << " new=" << seqlen_new;
  if (paged()) text << " page=" << page_size;
  if (cache_batch_idx) text << " cache_batch_idx";
  if (!cache_leftpad.empty()) text << " leftpad";
  if (rotary_dim > 0) {
    text << " rotary=" << rotary_dim << (rotary_interleaved ? " interleaved" : " neox");
  }
  if (causal) text << " causal";
  if (window_left >= 0 || window_right >= 0) {
    text << " window(" << window_left << "," << window_right << ")";
  }
  if (softcap > 0) text << " softcap=" << softcap;
  if (alibi) text << " alibi";
  text << " splits=" << num_splits << " seed=" << seed;
  return text.str();
}

KVCacheInputs make_kvcache_inputs(const KVCacheProblem& p) {
  std::mt19937 rng(p.seed);
  // Layout choices come from their own stream so they never shift the drawn values.
  std::mt19937 layout_rng(p.seed ^ 0x9E3779B9u);
  KVCacheInputs in;

  std::vector<int32_t> seqlens(p.cache_seqlens.begin(), p.cache_seqlens.end());
  if (seqlens.empty()) {
    std::uniform_int_distribution<int> length(0, p.capacity() - p.seqlen_new);
    for (int b = 0; b < p.batch; ++b) seqlens.push_back(length(layout_rng));
  }
  in.cache_seqlens = int32_tensor(seqlens);
  if (!p.cache_leftpad.empty()) {
    in.cache_leftpad =
        int32_tensor(std::vector<int32_t>(p.cache_leftpad.begin(), p.cache_leftpad.end()));
  }
  if (p.paged()) {
    const std::vector<int32_t> pages = shuffled_range(p.batch * p.pages_per_row(), layout_rng);
    in.block_table = HostTensor(DType::kI32, {p.batch, p.pages_per_row()});
    for (size_t n = 0; n < pages.size(); ++n) in.block_table.set(int64_t(n), pages[n]);
    in.k_cache = HostTensor(p.cache_dtype(), {p.batch * p.pages_per_row(), p.page_size,
                                              p.nheads_k, p.head_dim});
  } else {
    if (p.cache_batch_idx) {
      std::vector<int32_t> rows = shuffled_range(p.batch_cache(), layout_rng);
      rows.resize(static_cast<size_t>(p.batch));
      in.cache_batch_idx = int32_tensor(rows);
    }
    in.k_cache =
        HostTensor(p.cache_dtype(), {p.batch_cache(), p.capacity(), p.nheads_k, p.head_dim});
  }
  in.v_cache = in.k_cache;
  fill_caches(p, &in, rng);

  in.q = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim});
  fill_random(&in.q, p, rng);
  if (p.seqlen_new > 0) {
    in.k_new = HostTensor(p.dtype, {p.batch, p.seqlen_new, p.nheads_k, p.head_dim});
    in.v_new = in.k_new;
    fill_random(&in.k_new, p, rng);
    fill_random(&in.v_new, p, rng);
  }
  if (p.rotary_dim > 0) fill_rotary_tables(p, &in);
  if (p.alibi) {
    in.alibi_slopes = HostTensor(DType::kF32, {p.nheads});
    in.alibi_slopes.fill_uniform(rng, 0.f, 0.5f);
  }
  if (p.fp8_cache) {
    const std::vector<int64_t> shape =
        p.one_descale ? std::vector<int64_t>{1} : std::vector<int64_t>{p.batch, p.nheads_k};
    for (HostTensor* t : {&in.k_descale, &in.v_descale}) {
      *t = HostTensor(DType::kF32, shape);
      t->fill_uniform(rng, 0.25f, 2.f);
    }
  }
  return in;
}

KVCacheOutputs make_kvcache_outputs(const KVCacheProblem& p, const KVCacheInputs& in) {
  KVCacheOutputs o;
  o.out = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim});
  o.lse = HostTensor(DType::kF32, {p.batch, p.nheads, p.seqlen_q});
  o.out.poison();
  o.lse.poison();
  o.k_cache = in.k_cache;
  o.v_cache = in.v_cache;
  return o;
}

flashattn::KVCacheArgs kvcache_args(const KVCacheProblem& p, const KVCacheInputs& in,
                                    KVCacheOutputs* out) {
  flashattn::KVCacheArgs args;
  args.q = in.q.view();
  args.k_cache = out->k_cache.view();
  args.v_cache = out->v_cache.view();
  args.cache_seqlens = in.cache_seqlens.view();
  if (p.seqlen_new > 0) {
    args.k_new = in.k_new.view();
    args.v_new = in.v_new.view();
  }
  if (p.paged()) args.block_table = in.block_table.view();
  if (p.cache_batch_idx && !p.paged()) args.cache_batch_idx = in.cache_batch_idx.view();
  if (!p.cache_leftpad.empty()) args.cache_leftpad = in.cache_leftpad.view();
  if (p.rotary_dim > 0) {
    args.rotary_cos = in.rotary_cos.view();
    args.rotary_sin = in.rotary_sin.view();
    args.rotary_interleaved = p.rotary_interleaved;
  }
  args.num_splits = p.num_splits;
  args.out = out->out.view();
  args.lse = out->lse.view();
  if (p.softmax_scale != 0.f) args.options.softmax_scale = p.softmax_scale;
  args.options.causal = p.causal;
  args.options.window_left = p.window_left;
  args.options.window_right = p.window_right;
  args.options.softcap = p.softcap;
  if (p.alibi) args.options.alibi_slopes = in.alibi_slopes.view();
  args.descale.k = in.k_descale.view();
  args.descale.v = in.v_descale.view();
  return args;
}

int64_t cache_index(const KVCacheProblem& p, const KVCacheInputs& in, int b, int position,
                    int head, int c) {
  int64_t row = b;  // a contiguous cache row, or a page
  int64_t row_position = position;
  int64_t rows = p.capacity();
  if (p.paged()) {
    row = static_cast<int64_t>(in.block_table.get(int64_t(b) * p.pages_per_row() +
                                                  position / p.page_size));
    row_position = position % p.page_size;
    rows = p.page_size;
  } else if (p.cache_batch_idx) {
    row = static_cast<int64_t>(in.cache_batch_idx.get(b));
  }
  return ((row * rows + row_position) * p.nheads_k + head) * p.head_dim + c;
}

CheckResult check_kvcache(const KVCacheProblem& problem, const Runner& runner) {
  return check_kvcache(problem, runner, make_kvcache_inputs(problem));
}

CheckResult check_kvcache(const KVCacheProblem& problem, const Runner& runner,
                          const KVCacheInputs& inputs) {
  CheckResult result;
  result.problem = problem.describe() + " on " + runner.name;
  KVCacheOutputs tested = make_kvcache_outputs(problem, inputs);
  KVCacheOutputs exact = make_kvcache_outputs(problem, inputs);
  KVCacheOutputs lowp = make_kvcache_outputs(problem, inputs);
  result.status = runner.forward_kvcache(kvcache_args(problem, inputs, &tested));
  if (!result.status.ok()) return result;
  const Runner exact_runner = reference_runner(ReferencePrecision::kExact);
  const Runner lowp_runner = reference_runner(ReferencePrecision::kLowPrecisionNaive);
  result.status = labelled(exact_runner.forward_kvcache(kvcache_args(problem, inputs, &exact)),
                           exact_runner.name);
  if (!result.status.ok()) return result;
  result.status = labelled(lowp_runner.forward_kvcache(kvcache_args(problem, inputs, &lowp)),
                           lowp_runner.name);
  if (!result.status.ok()) return result;

  const double scale = problem.eps_scale;
  compare(&result, "out", tested.out, exact.out, lowp.out,
          tolerance_eps(problem.dtype, exact.out, scale));
  compare(&result, "lse", tested.lse, exact.lse, lowp.lse,
          tolerance_eps(DType::kF32, exact.lse, 64 * scale));
  // The appended (rotated) keys may differ by the rounding of the rotation.
  compare(&result, "k_cache", tested.k_cache, exact.k_cache, lowp.k_cache,
          tolerance_eps(problem.cache_dtype(), exact.k_cache, scale));
  compare(&result, "v_cache", tested.v_cache, exact.v_cache, lowp.v_cache,
          tolerance_eps(problem.cache_dtype(), exact.v_cache, scale));
  return result;
}

}  // namespace fa_test
