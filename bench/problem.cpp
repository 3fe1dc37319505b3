#include "problem.hpp"

#include <algorithm>
#include <cmath>

#include "core/mask.hpp"
#include "core/numeric.hpp"

namespace fa_bench {
namespace {

using flashattn::DType;
using flashattn::Tensor;

// splitmix64: a counter-based generator, so the fill parallelizes and a large problem's
// inputs take milliseconds instead of seconds per process.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Standard normal values (Box-Muller over two 32-bit uniforms of one draw).
std::vector<uint8_t> random_bytes(size_t count, DType dtype, uint64_t stream) {
  std::vector<uint8_t> bytes(count * flashattn::dtype_size(dtype));
  const auto type = flashattn::core::element_type(dtype);
  const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = mix(stream * 0x100000001B3ull + static_cast<uint64_t>(i));
    const double u1 = (static_cast<double>(r >> 32) + 1.0) / 4294967297.0;
    const double u2 = static_cast<double>(r & 0xFFFFFFFFu) / 4294967296.0;
    const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    flashattn::core::store_element(bytes.data(), i, type, static_cast<float>(normal));
  }
  return bytes;
}

size_t q_count(const Options& o) { return size_t(o.batch) * o.seqlen_q * o.heads * o.hdim; }
size_t kv_count(const Options& o) { return size_t(o.batch) * o.seqlen_k * o.heads_k * o.hdim; }
size_t lse_count(const Options& o) { return size_t(o.batch) * o.heads * o.seqlen_q; }

}  // namespace

HostInputs make_inputs(const Options& o, DType dtype, uint32_t seed) {
  const uint64_t stream = static_cast<uint64_t>(seed) * 4;
  HostInputs in{dtype, {}, {}, {}, {}};
  in.q = random_bytes(q_count(o), dtype, stream);
  in.k = random_bytes(kv_count(o), dtype, stream + 1);
  in.v = random_bytes(kv_count(o), dtype, stream + 2);
  if (o.direction == Direction::kBackward) in.dout = random_bytes(q_count(o), dtype, stream + 3);
  return in;
}

int buffer_sets_needed(const Memory& memory, const Options& o, DType dtype) {
  const size_t cache = memory.cache_bytes();
  if (cache == 0) return 1;
  size_t bytes = (2 * q_count(o) + 2 * kv_count(o)) * flashattn::dtype_size(dtype);
  if (o.direction == Direction::kBackward) bytes *= 2;
  const size_t sets = (2 * cache + bytes - 1) / bytes;
  return static_cast<int>(std::clamp<size_t>(sets, 1, 8));
}

bool make_buffer_set(Memory& memory, const Options& o, const HostInputs& in, BufferSet* set) {
  const flashattn::Device device = memory.device();
  const DType dtype = in.dtype;
  auto tensor = [&](std::initializer_list<int64_t> shape, DType type, const std::vector<uint8_t>* init) {
    size_t count = 1;
    for (int64_t s : shape) count *= static_cast<size_t>(s);
    const size_t bytes = count * flashattn::dtype_size(type);
    void* data = memory.allocate(bytes);
    if (data != nullptr && init != nullptr) memory.upload(data, init->data(), bytes);
    return flashattn::make_tensor(data, type, shape, device);
  };
  const int64_t b = o.batch, sq = o.seqlen_q, sk = o.seqlen_k, h = o.heads, hk = o.heads_k, d = o.hdim;
  set->q = tensor({b, sq, h, d}, dtype, &in.q);
  set->k = tensor({b, sk, hk, d}, dtype, &in.k);
  set->v = tensor({b, sk, hk, d}, dtype, &in.v);
  // e4m3 inputs (FP8, forward only) give a bf16 output.
  const DType out_dtype = dtype == DType::kF8E4M3 ? DType::kBF16 : dtype;
  set->out = tensor({b, sq, h, d}, out_dtype, nullptr);
  set->lse = tensor({b, h, sq}, DType::kF32, nullptr);
  bool ok = set->q.data && set->k.data && set->v.data && set->out.data && set->lse.data;
  if (o.direction == Direction::kBackward) {
    set->dout = tensor({b, sq, h, d}, dtype, &in.dout);
    set->dq = tensor({b, sq, h, d}, dtype, nullptr);
    set->dk = tensor({b, sk, hk, d}, dtype, nullptr);
    set->dv = tensor({b, sk, hk, d}, dtype, nullptr);
    ok = ok && set->dout.data && set->dq.data && set->dk.data && set->dv.data;
  }
  return ok;
}

flashattn::AttentionOptions attention_options(const Options& o) {
  flashattn::AttentionOptions a;
  a.causal = o.causal;
  a.window_left = o.window_left;
  a.window_right = o.window_right;
  a.softcap = o.softcap;
  a.dropout_p = o.dropout_p;
  a.dropout_seed = 0x5eed;
  return a;
}

flashattn::ForwardArgs forward_args(const BufferSet& set, const Options& o) {
  flashattn::ForwardArgs args;
  args.q = set.q;
  args.k = set.k;
  args.v = set.v;
  args.out = set.out;
  args.lse = set.lse;
  args.options = attention_options(o);
  return args;
}

flashattn::BackwardArgs backward_args(const BufferSet& set, const Options& o) {
  flashattn::BackwardArgs args;
  args.dout = set.dout;
  args.q = set.q;
  args.k = set.k;
  args.v = set.v;
  args.out = set.out;
  args.lse = set.lse;
  args.dq = set.dq;
  args.dk = set.dk;
  args.dv = set.dv;
  args.options = attention_options(o);
  return args;
}

double forward_flops(const Options& o) {
  const double full = 4.0 * o.batch * o.heads * double(o.seqlen_q) * o.seqlen_k * o.hdim;
  const bool windowed = o.window_left >= 0 || (o.window_right >= 0 && !(o.causal && o.window_right == 0));
  if (o.causal && !windowed) return full / 2;
  if (!windowed) return full;
  const int right = o.causal ? 0 : o.window_right;
  double pairs = 0;
  for (int i = 0; i < o.seqlen_q; ++i) {
    const auto r = flashattn::core::visible_keys(i, o.seqlen_q, o.seqlen_k, o.window_left, right);
    pairs += r.end - r.begin;
  }
  return full * pairs / (double(o.seqlen_q) * o.seqlen_k);
}

}  // namespace fa_bench
