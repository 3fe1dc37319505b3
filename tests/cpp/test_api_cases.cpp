// The valid calls of test_api_cases.hpp (no tests here).
#include "test_api_cases.hpp"

#include <algorithm>
#include <cmath>
#include <random>

namespace api_test {
namespace {

using flashattn::Status;
using flashattn::StatusCode;

std::mt19937& rng() {
  static std::mt19937 generator(20240611);
  return generator;
}

HostTensor random_tensor(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.fill_uniform(rng());
  return t;
}

Snapshot snapshot_of(std::initializer_list<const HostTensor*> tensors) {
  Snapshot bytes;
  for (const HostTensor* t : tensors) bytes.push_back(t->raw_bytes());
  return bytes;
}

}  // namespace

ForwardCase::ForwardCase(const Problem& problem)
    : p(problem),
      q(random_tensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim})),
      k(random_tensor(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim})),
      v(random_tensor(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim})),
      out(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim}),
      lse(DType::kF32, {p.batch, p.nheads, p.seqlen_q}) {
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.out = out.view();
  args.lse = lse.view();
}

void ForwardCase::poison_outputs() {
  out.poison();
  lse.poison();
}

Snapshot ForwardCase::outputs() const { return snapshot_of({&out, &lse}); }

BackwardCase::BackwardCase(const Problem& problem)
    : p(problem),
      dout(random_tensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim})),
      q(random_tensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim})),
      k(random_tensor(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim})),
      v(random_tensor(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim})),
      out(random_tensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim})),
      lse(random_tensor(DType::kF32, {p.batch, p.nheads, p.seqlen_q})),
      dq(p.dtype, {p.batch, p.seqlen_q, p.nheads, p.head_dim}),
      dk(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim}),
      dv(p.dtype, {p.batch, p.seqlen_k, p.nheads_k, p.head_dim}) {
  args.dout = dout.view();
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.out = out.view();
  args.lse = lse.view();
  args.dq = dq.view();
  args.dk = dk.view();
  args.dv = dv.view();
}

void BackwardCase::poison_outputs() {
  dq.poison();
  dk.poison();
  dv.poison();
}

Snapshot BackwardCase::outputs() const { return snapshot_of({&dq, &dk, &dv}); }

VarlenCase::VarlenCase(std::vector<int32_t> lengths_q, std::vector<int32_t> lengths_k,
                       const Problem& problem)
    : p(problem) {
  std::vector<int32_t> offsets_q{0}, offsets_k{0};
  int32_t longest_q = 0, longest_k = 0;
  for (int32_t n : lengths_q) {
    offsets_q.push_back(offsets_q.back() + n);
    longest_q = std::max(longest_q, n);
  }
  for (int32_t n : lengths_k) {
    offsets_k.push_back(offsets_k.back() + n);
    longest_k = std::max(longest_k, n);
  }
  cu_seqlens_q = fa_test::int32_tensor(offsets_q);
  cu_seqlens_k = fa_test::int32_tensor(offsets_k);
  const int64_t total_q = offsets_q.back(), total_k = offsets_k.back();
  q = random_tensor(p.dtype, {total_q, p.nheads, p.head_dim});
  k = random_tensor(p.dtype, {total_k, p.nheads_k, p.head_dim});
  v = random_tensor(p.dtype, {total_k, p.nheads_k, p.head_dim});
  out = HostTensor(p.dtype, {total_q, p.nheads, p.head_dim});
  lse = HostTensor(DType::kF32, {p.nheads, total_q});
  args.q = q.view();
  args.k = k.view();
  args.v = v.view();
  args.out = out.view();
  args.lse = lse.view();
  args.varlen.cu_seqlens_q = cu_seqlens_q.view();
  args.varlen.cu_seqlens_k = cu_seqlens_k.view();
  args.varlen.max_seqlen_q = longest_q;
  args.varlen.max_seqlen_k = longest_k;
}

KVCacheCase::KVCacheCase(const KVCacheShape& kv, const Problem& problem) : p(problem), shape(kv) {
  const int64_t hk = p.nheads_k, d = p.head_dim;
  q = random_tensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, d});
  out = HostTensor(p.dtype, {p.batch, p.seqlen_q, p.nheads, d});
  lse = HostTensor(DType::kF32, {p.batch, p.nheads, p.seqlen_q});
  std::vector<int32_t> cached;
  for (int64_t b = 0; b < p.batch; ++b) {
    cached.push_back(static_cast<int32_t>((3 + 7 * b) % (kv.seqlen_cache - kv.seqlen_new + 1)));
  }
  cache_seqlens = fa_test::int32_tensor(cached);
  if (kv.paged) {
    // Pages handed out in reverse order, so the block table really indirects.
    const int64_t max_pages = kv.seqlen_cache / kv.page_size;
    const int64_t num_pages = p.batch * max_pages + 1;
    k_cache = random_tensor(p.dtype, {num_pages, kv.page_size, hk, d});
    v_cache = random_tensor(p.dtype, {num_pages, kv.page_size, hk, d});
    block_table = HostTensor(DType::kI32, {p.batch, max_pages});
    for (int64_t n = 0; n < p.batch * max_pages; ++n) {
      block_table.set(n, static_cast<float>(num_pages - 1 - n));
    }
    args.block_table = block_table.view();
  } else {
    k_cache = random_tensor(p.dtype, {p.batch, kv.seqlen_cache, hk, d});
    v_cache = random_tensor(p.dtype, {p.batch, kv.seqlen_cache, hk, d});
  }
  if (kv.seqlen_new > 0) {
    k_new = random_tensor(p.dtype, {p.batch, kv.seqlen_new, hk, d});
    v_new = random_tensor(p.dtype, {p.batch, kv.seqlen_new, hk, d});
    args.k_new = k_new.view();
    args.v_new = v_new.view();
  }
  if (kv.rotary) {
    const int64_t half = kv.rotary_dim / 2;
    rotary_cos = HostTensor(p.dtype, {kv.seqlen_cache, half});
    rotary_sin = HostTensor(p.dtype, {kv.seqlen_cache, half});
    for (int64_t pos = 0; pos < kv.seqlen_cache; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * std::pow(10000.0, -2.0 * i / kv.rotary_dim);
        rotary_cos.set(pos * half + i, static_cast<float>(std::cos(angle)));
        rotary_sin.set(pos * half + i, static_cast<float>(std::sin(angle)));
      }
    }
    args.rotary_cos = rotary_cos.view();
    args.rotary_sin = rotary_sin.view();
  }
  args.q = q.view();
  args.k_cache = k_cache.view();
  args.v_cache = v_cache.view();
  args.cache_seqlens = cache_seqlens.view();
  args.out = out.view();
  args.lse = lse.view();
}

void KVCacheCase::poison_outputs() {
  out.poison();
  lse.poison();
}

Snapshot KVCacheCase::outputs() const { return snapshot_of({&out, &lse, &k_cache, &v_cache}); }

::testing::AssertionResult Rejected(const Status& status, StatusCode code,
                                    const std::string& argument) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected code '" << flashattn::to_string(code) << "', got '"
           << flashattn::to_string(status.code()) << "': " << status.message();
  }
  if (status.message().rfind(argument + ":", 0) != 0) {
    return ::testing::AssertionFailure()
           << "expected the message to name '" << argument << "' first, got: " << status.message();
  }
  return ::testing::AssertionSuccess() << status.message();
}

::testing::AssertionResult Rejected(const Status& status, StatusCode code,
                                    const std::string& argument, const std::string& detail) {
  ::testing::AssertionResult named = Rejected(status, code, argument);
  if (!named) return named;
  if (status.message().find(detail) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "expected '" << detail << "' in the message, got: " << status.message();
  }
  return named;
}

flashattn::Tensor on_device(flashattn::Tensor t, flashattn::DeviceType type, int index) {
  t.device = flashattn::Device{type, index};
  return t;
}

}  // namespace api_test
