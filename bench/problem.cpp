#include "problem.hpp"

#include <algorithm>
#include <random>

#include "core/mask.hpp"
#include "core/numeric.hpp"

namespace fa_bench {
namespace {

using flashattn::DType;
using flashattn::Tensor;

std::vector<uint8_t> random_bytes(size_t count, DType dtype, std::mt19937& rng) {
  std::vector<uint8_t> bytes(count * flashattn::dtype_size(dtype));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (size_t i = 0; i < count; ++i) {
    flashattn::core::store_element(bytes.data(), static_cast<int64_t>(i), flashattn::core::element_type(dtype),
                                   normal(rng));
  }
  return bytes;
}

size_t q_count(const Options& o) { return size_t(o.batch) * o.seqlen_q * o.heads * o.hdim; }
size_t kv_count(const Options& o) { return size_t(o.batch) * o.seqlen_k * o.heads_k * o.hdim; }
size_t lse_count(const Options& o) { return size_t(o.batch) * o.heads * o.seqlen_q; }

}  // namespace

HostInputs make_inputs(const Options& o, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  HostInputs in{dtype, {}, {}, {}, {}};
  in.q = random_bytes(q_count(o), dtype, rng);
  in.k = random_bytes(kv_count(o), dtype, rng);
  in.v = random_bytes(kv_count(o), dtype, rng);
  if (o.direction == Direction::kBackward) in.dout = random_bytes(q_count(o), dtype, rng);
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
  set->out = tensor({b, sq, h, d}, dtype, nullptr);
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
