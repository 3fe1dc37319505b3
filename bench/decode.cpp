#include "decode.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "host_time.hpp"
#include "memory.hpp"

namespace fa_bench {
namespace {

using flashattn::DType;

struct DecodeSet {
  flashattn::KVCacheArgs args;
};

// Random finite values (bf16: magnitudes in [2^-7, 2^-6), fp16: [1, 1.125), e4m3: [0.5, 1),
// either sign), uploaded in chunks so that a 34 GB cache never needs a host copy of its
// size. Decode speed does not depend on the values.
bool fill_random(Memory& memory, void* dst, size_t bytes, DType type, std::mt19937& rng) {
  static std::vector<uint16_t> pattern, e4m3_pattern;
  std::vector<uint16_t>& words = type == DType::kF8E4M3 ? e4m3_pattern : pattern;
  if (words.empty()) {
    words.resize(size_t(8) << 20);
    std::uniform_int_distribution<int> mantissa(0, 127);
    std::uniform_int_distribution<int> sign(0, 1);
    // e4m3: exponent 6 (bias 7), any of the 8 mantissas, in each byte of the word.
    auto e4m3 = [&] { return (sign(rng) << 7) | 0x30 | (mantissa(rng) & 7); };
    for (uint16_t& x : words) {
      x = type == DType::kF8E4M3 ? uint16_t(e4m3() | (e4m3() << 8))
                                 : uint16_t((sign(rng) << 15) | 0x3c00 | mantissa(rng));
    }
  }
  const size_t chunk = words.size() * sizeof(uint16_t);
  for (size_t done = 0; done < bytes; done += chunk) {
    memory.upload(static_cast<char*>(dst) + done, words.data(), std::min(chunk, bytes - done));
  }
  return true;
}

}  // namespace

int run_decode(const Options& o) {
  using flashattn::Backend;
  Backend backend = o.backend;
  if (backend == Backend::kAuto) {
    backend = flashattn::cuda_available() ? Backend::kCuda : Backend::kCpu;
  }
  std::unique_ptr<Memory> memory =
      backend == Backend::kCuda ? make_cuda_memory() : make_host_memory();
  if (!memory) {
    std::fprintf(stderr, "flashattn-bench: --backend cuda needs a CUDA build and a visible GPU\n");
    return 1;
  }
  const DType dtype = o.dtype == "fp16" ? DType::kF16 : (o.dtype == "fp32" ? DType::kF32 : DType::kBF16);
  const int64_t b = o.batch, h = o.heads, hk = o.heads_k, d = o.hdim, n = o.cache_len,
                sq = o.seqlen_q;
  const bool paged = o.page_size > 0;
  if (paged && n % o.page_size != 0) {
    std::fprintf(stderr, "flashattn-bench: --cache-len must be a multiple of --page-size\n");
    return 2;
  }
  const DType cache_dtype = o.e4m3_cache ? DType::kF8E4M3 : dtype;
  const size_t element = flashattn::dtype_size(cache_dtype);
  const size_t kv_bytes = size_t(2) * b * n * hk * d * element;  // K and V, read once each
  // Enough sets that cycling through them does not run from L2, at most 16, one when a set
  // alone is larger than the cache several times over.
  const size_t l2 = memory->cache_bytes();
  const int sets_needed =
      static_cast<int>(std::clamp<size_t>(l2 == 0 ? 1 : (4 * l2 + kv_bytes - 1) / kv_bytes, 1, 16));

  const flashattn::Device device = memory->device();
  std::mt19937 rng(20261130);
  auto tensor = [&](std::initializer_list<int64_t> shape, DType type, bool random) {
    size_t count = 1;
    for (int64_t s : shape) count *= static_cast<size_t>(s);
    void* data = memory->allocate(count * flashattn::dtype_size(type));
    if (data != nullptr && random) {
      fill_random(*memory, data, count * flashattn::dtype_size(type), type, rng);
    }
    return flashattn::make_tensor(data, type, shape, device);
  };
  // A cache of `rows` x keys x heads_k x d, stored row by row or head by head (--cache-layout).
  auto cache_tensor = [&](int64_t rows, int64_t keys) {
    flashattn::Tensor t = tensor({rows, keys, hk, d}, cache_dtype, true);
    if (o.heads_major && t.data != nullptr) {
      t = flashattn::make_strided_tensor(t.data, cache_dtype, {rows, keys, hk, d},
                                         {keys * hk * d, d, keys * d, 1}, device);
    }
    return t;
  };
  auto int_tensor = [&](const std::vector<int32_t>& values, std::initializer_list<int64_t> shape) {
    void* data = memory->allocate(values.size() * sizeof(int32_t));
    if (data != nullptr) memory->upload(data, values.data(), values.size() * sizeof(int32_t));
    return flashattn::make_tensor(data, DType::kI32, shape, device);
  };
  // An e4m3 cache's descales [batch, heads_k], one factor per (batch entry, KV head).
  auto descale_tensor = [&] {
    std::uniform_real_distribution<float> factor(0.25f, 2.f);
    std::vector<float> values(static_cast<size_t>(b * hk));
    for (float& x : values) x = factor(rng);
    void* data = memory->allocate(values.size() * sizeof(float));
    if (data != nullptr) memory->upload(data, values.data(), values.size() * sizeof(float));
    return flashattn::make_tensor(data, DType::kF32, {b, hk}, device);
  };

  std::vector<DecodeSet> sets(static_cast<size_t>(sets_needed));
  const int64_t pages_per_entry = paged ? n / o.page_size : 0;
  for (DecodeSet& set : sets) {
    flashattn::KVCacheArgs& a = set.args;
    a.q = tensor({b, sq, h, d}, dtype, true);
    if (paged) {
      a.k_cache = cache_tensor(b * pages_per_entry, o.page_size);
      a.v_cache = cache_tensor(b * pages_per_entry, o.page_size);
      std::vector<int32_t> pages(static_cast<size_t>(b * pages_per_entry));
      std::iota(pages.begin(), pages.end(), 0);
      if (!o.pages_in_order) std::shuffle(pages.begin(), pages.end(), rng);
      a.block_table = int_tensor(pages, {b, pages_per_entry});
    } else {
      a.k_cache = cache_tensor(b, n);
      a.v_cache = cache_tensor(b, n);
    }
    a.cache_seqlens = int_tensor(std::vector<int32_t>(static_cast<size_t>(b), int32_t(n)), {b});
    a.num_splits = o.num_splits;
    a.out = tensor({b, sq, h, d}, dtype, false);
    a.lse = tensor({b, h, sq}, DType::kF32, false);
    a.options.causal = o.causal;
    if (o.e4m3_cache) {
      a.descale.k = descale_tensor();
      a.descale.v = descale_tensor();
    }
    if (a.q.data == nullptr || a.k_cache.data == nullptr || a.v_cache.data == nullptr ||
        a.out.data == nullptr || a.lse.data == nullptr ||
        (o.e4m3_cache && (a.descale.k.data == nullptr || a.descale.v.data == nullptr))) {
      std::fprintf(stderr, "flashattn-bench: out of memory for the decode buffers\n");
      return 1;
    }
  }

  flashattn::Launch launch{backend, memory->stream(), nullptr, 0};
  size_t workspace = 0;
  flashattn::Status status = flashattn::workspace_size(sets[0].args, backend, &workspace);
  if (!status.ok()) {
    std::fprintf(stderr, "flashattn-bench: workspace size: %s\n", status.message().c_str());
    return 1;
  }
  if (workspace > 0) {
    launch.workspace = memory->allocate(workspace);
    launch.workspace_bytes = workspace;
  }
  const bool slow = backend != Backend::kCuda;
  const int warmup = o.warmup >= 0 ? o.warmup : (slow ? 1 : 10);
  const int iters = o.iters > 0 ? o.iters : (slow ? 3 : 50);
  auto call = [&](int i) {
    return flashattn::forward_kvcache(sets[size_t(i) % sets.size()].args, launch);
  };
  std::vector<double> ms = memory->time(call, warmup, iters, &status);
  HostTime host;
  if (status.ok() && o.host_time_calls > 0) {
    auto supported = [&] { return flashattn::supported(sets[0].args, backend); };
    host = measure_host_time(*memory, o.host_time_calls, supported, call, &status);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "flashattn-bench: forward_kvcache: %s (%s)\n", status.message().c_str(),
                 flashattn::to_string(status.code()));
    return 1;
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  // K/V bytes read per second, and the same keys per second as the TB/s a 16-bit cache
  // would need (an e4m3 cache reads half the bytes per key).
  const double tbps = kv_bytes / (median * 1e-3) / 1e12;
  const double tbps_16bit = tbps * 2.0 / static_cast<double>(element);
  double flops = 4.0 * b * h * sq * n * d;
  if (o.causal) flops -= 2.0 * b * h * sq * (sq - 1) * d;  // rows i see n - sq + 1 + i keys
  const double tflops = flops / (median * 1e-3) / 1e12;
  std::printf("{\"mode\": \"decode\", \"backend\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", "
              "\"batch\": %lld, \"heads\": %lld, \"heads_k\": %lld, \"seqlen_q\": %lld, "
              "\"cache_len\": %lld, \"hdim\": %lld, \"page_size\": %d, \"num_splits\": %d, "
              "\"cache_layout\": \"%s\", \"page_order\": \"%s\", "
              "\"causal\": %s, \"ms\": %.6f, \"ms_min\": %.6f, \"iters\": %zu, \"buffer_sets\": %zu, "
              "\"cache_dtype\": \"%s\", \"kv_bytes\": %zu, \"tbps\": %.4f, "
              "\"tbps_16bit_equivalent\": %.4f, \"tflops\": %.4f",
              flashattn::to_string(backend), memory->device_name().c_str(),
              flashattn::to_string(dtype), (long long)b, (long long)h, (long long)hk,
              (long long)sq, (long long)n, (long long)d, o.page_size, o.num_splits,
              o.heads_major ? "heads" : "rows", o.pages_in_order ? "sequential" : "shuffled",
              o.causal ? "true" : "false", median, ms.front(), ms.size(), sets.size(),
              flashattn::to_string(cache_dtype), kv_bytes, tbps, tbps_16bit, tflops);
  print_host_time_json(host);
  std::printf("}\n");
  return 0;
}

}  // namespace fa_bench
