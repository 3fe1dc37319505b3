#include "fuzz_instance.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>

#include "core/numeric.hpp"

namespace fa_fuzz {
namespace {

using flashattn::DType;
using flashattn::Tensor;

constexpr size_t kMaxBufferBytes = size_t{16} << 20;  // larger views stay unbacked
constexpr uint8_t kGapByte = 0xA5;

bool is_index(Slot s) {
  return s == kCuQ || s == kCuK || s == kUsedK || s == kCacheSeqlens || s == kBlockTable ||
         s == kBatchIdx || s == kLeftpad;
}

Tensor describe(DType dtype, std::vector<int64_t> shape, int64_t pad) {
  Tensor t;
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = stride;
    // A padded view: every row of the last dimension is `pad` elements longer.
    stride *= shape[d] + (d == t.rank - 1 ? pad : 0);
  }
  return t;
}

// The sizes a case implies, drawn from its seed.
struct Layout {
  int nheads = 1;
  int total_q = 0, total_k = 0;
  int max_q = 0, max_k = 0;
  std::vector<int32_t> cu_q, cu_k, used_k;
  // KV cache
  int batch_cache = 0, rows_per_entry = 0, num_pages = 0, pages_per_entry = 0;
  std::vector<int32_t> cache_seqlens, leftpad, batch_idx, block_table;
};

Layout layout_of(const Case& c, std::mt19937& rng) {
  Layout l;
  l.nheads = c.nheads_k * c.group;
  const auto below = [&](int n) {
    return std::uniform_int_distribution<int>(0, std::max(n, 0))(rng);
  };
  if (c.varlen) {
    l.cu_q = {0};
    l.cu_k = {0};
    for (int b = 0; b < c.batch; ++b) {
      const int sq = below(c.seqlen_q), sk = below(c.seqlen_k);
      l.cu_q.push_back(l.cu_q.back() + sq);
      l.cu_k.push_back(l.cu_k.back() + sk);
      l.max_q = std::max(l.max_q, sq);
      l.max_k = std::max(l.max_k, sk);
      if (c.seqused) l.used_k.push_back(below(sk));
    }
    l.total_q = l.cu_q.back();
    l.total_k = l.cu_k.back();
  }
  if (static_cast<Entry>(c.entry) == Entry::kKVCache) {
    const int room = std::max(c.capacity - c.seqlen_new, 0);
    for (int b = 0; b < c.batch; ++b) {
      l.cache_seqlens.push_back(below(room));
      l.leftpad.push_back(c.leftpad ? below(l.cache_seqlens.back()) : 0);
    }
    if (c.page_size > 0) {
      l.pages_per_entry = (c.capacity + c.page_size - 1) / c.page_size;
      l.num_pages = c.batch * l.pages_per_entry + 1;
      std::vector<int32_t> pages(l.num_pages);
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      l.block_table.assign(pages.begin(), pages.begin() + c.batch * l.pages_per_entry);
    } else {
      l.batch_cache = c.batch + c.batch_idx;
      for (int b = 0; b < c.batch; ++b) l.batch_idx.push_back(b + c.batch_idx);
      std::shuffle(l.batch_idx.begin(), l.batch_idx.end(), rng);
    }
  }
  return l;
}

// dtype 3 is FP8: e4m3 q, k, v (the forward; the backward rejects it) or e4m3 caches (a
// KV cache), the rest bf16; no descale tensors (factors of 1).
DType dtype_of(const Case& c) {
  return c.dtype == 1   ? DType::kF16
         : c.dtype == 2 ? DType::kBF16
         : c.dtype == 3 ? DType::kF8E4M3
                        : DType::kF32;
}

// What an e4m3 call keeps in 16 bits: out (and, with a cache, q, k_new, v_new, rotary).
DType wide_dtype_of(const Case& c) {
  return c.dtype == 3 ? DType::kBF16 : dtype_of(c);
}

// FP8 cases get descales chosen by their seed: none, [batch, nheads_k] or one factor [1].
void describe_descales(const Case& c, std::initializer_list<Slot> slots, Instance* in) {
  const int kind = static_cast<int>((c.seed >> 3) % 3);
  if (kind == 0) return;
  for (Slot s : slots) {
    *in->slot(s) = kind == 1 ? describe(DType::kF32, {c.batch, c.nheads_k}, 0)
                             : describe(DType::kF32, {1}, 0);
  }
}

void describe_attention(const Case& c, const Layout& l, Instance* in) {
  const DType dt = dtype_of(c);
  const int64_t pad = c.padded ? 8 : 0;
  const int h = l.nheads, hk = c.nheads_k, d = c.head_dim;
  const auto rows = [&](int dense_rows, int packed_rows, int heads) -> std::vector<int64_t> {
    if (c.varlen) return {packed_rows, heads, d};
    return {c.batch, dense_rows, heads, d};
  };
  *in->slot(kQ) = describe(dt, rows(c.seqlen_q, l.total_q, h), pad);
  *in->slot(kK) = describe(dt, rows(c.seqlen_k, l.total_k, hk), pad);
  *in->slot(kV) = describe(dt, rows(c.seqlen_k, l.total_k, hk), pad);
  const bool backward = in->entry == Entry::kBackward;
  *in->slot(kOut) = describe(backward ? dt : wide_dtype_of(c), rows(c.seqlen_q, l.total_q, h), pad);
  if (c.lse || backward) {
    *in->slot(kLse) = c.varlen ? describe(DType::kF32, {h, l.total_q}, 0)
                               : describe(DType::kF32, {c.batch, h, c.seqlen_q}, 0);
  }
  if (backward) {
    *in->slot(kDout) = describe(dt, rows(c.seqlen_q, l.total_q, h), pad);
    *in->slot(kDq) = describe(dt, rows(c.seqlen_q, l.total_q, h), pad);
    *in->slot(kDk) = describe(dt, rows(c.seqlen_k, l.total_k, hk), pad);
    *in->slot(kDv) = describe(dt, rows(c.seqlen_k, l.total_k, hk), pad);
  }
  if (c.dtype == 3 && !backward) describe_descales(c, {kQDescale, kKDescale, kVDescale}, in);
  if (c.varlen) {
    *in->slot(kCuQ) = describe(DType::kI32, {c.batch + 1}, 0);
    *in->slot(kCuK) = describe(DType::kI32, {c.batch + 1}, 0);
    if (c.seqused) *in->slot(kUsedK) = describe(DType::kI32, {c.batch}, 0);
  }
}

void describe_kvcache(const Case& c, const Layout& l, Instance* in) {
  const DType dt = wide_dtype_of(c);
  const DType cache_dt = dtype_of(c);
  const int64_t pad = c.padded ? 8 : 0;
  const int h = l.nheads, hk = c.nheads_k, d = c.head_dim;
  *in->slot(kQ) = describe(dt, {c.batch, c.seqlen_q, h, d}, pad);
  *in->slot(kOut) = describe(dt, {c.batch, c.seqlen_q, h, d}, pad);
  if (c.lse) *in->slot(kLse) = describe(DType::kF32, {c.batch, h, c.seqlen_q}, 0);
  const std::vector<int64_t> cache = c.page_size > 0
                                         ? std::vector<int64_t>{l.num_pages, c.page_size, hk, d}
                                         : std::vector<int64_t>{l.batch_cache, c.capacity, hk, d};
  *in->slot(kK) = describe(cache_dt, cache, pad);
  *in->slot(kV) = describe(cache_dt, cache, pad);
  *in->slot(kCacheSeqlens) = describe(DType::kI32, {c.batch}, 0);
  if (c.page_size > 0) {
    *in->slot(kBlockTable) = describe(DType::kI32, {c.batch, l.pages_per_entry}, 0);
  } else if (c.batch_idx) {
    *in->slot(kBatchIdx) = describe(DType::kI32, {c.batch}, 0);
  }
  if (c.leftpad) *in->slot(kLeftpad) = describe(DType::kI32, {c.batch}, 0);
  if (c.seqlen_new > 0) {
    *in->slot(kKNew) = describe(dt, {c.batch, c.seqlen_new, hk, d}, pad);
    *in->slot(kVNew) = describe(dt, {c.batch, c.seqlen_new, hk, d}, pad);
  }
  if (c.rotary_dim > 0) {
    const int64_t rows = c.capacity + std::max(c.seqlen_q, c.seqlen_new);
    *in->slot(kRotaryCos) = describe(dt, {rows, c.rotary_dim / 2}, 0);
    *in->slot(kRotarySin) = describe(dt, {rows, c.rotary_dim / 2}, 0);
  }
  if (c.dtype == 3) describe_descales(c, {kKDescale, kVDescale}, in);
  in->kvcache.num_splits = c.num_splits;
}

flashattn::AttentionOptions* options_of(Instance* in) {
  switch (in->entry) {
    case Entry::kForward:
      return &in->forward.options;
    case Entry::kBackward:
      return &in->backward.options;
    case Entry::kKVCache:
      return &in->kvcache.options;
  }
  return nullptr;
}

flashattn::VarlenLayout* varlen_of(Instance* in) {
  if (in->entry == Entry::kForward) return &in->forward.varlen;
  if (in->entry == Entry::kBackward) return &in->backward.varlen;
  return nullptr;
}

void set_options(const Case& c, const Layout& l, Instance* in) {
  flashattn::AttentionOptions& o = *options_of(in);
  o.causal = c.causal != 0;
  o.window_left = c.window_left;
  o.window_right = c.window_right;
  o.softcap = 0.1f * static_cast<float>(c.softcap);
  o.dropout_p = 0.01f * static_cast<float>(c.dropout);
  o.dropout_seed = c.seed;
  o.dropout_offset = c.seed / 3;
  if (c.seed_in_memory) {
    in->seed_offset = std::make_shared<std::array<uint64_t, 2>>(
        std::array<uint64_t, 2>{c.seed, c.seed / 3});
    o.dropout_seed_offset = in->seed_offset->data();
    o.dropout_seed = ~o.dropout_seed;  // the fields must be ignored
    o.dropout_offset += 4;
  }
  if (c.scale >= 0) o.softmax_scale = 0.01f * static_cast<float>(c.scale);
  if (c.alibi) *in->slot(kAlibi) = describe(DType::kF32, {l.nheads}, 0);
  if (flashattn::VarlenLayout* v = varlen_of(in); v != nullptr && c.varlen) {
    v->max_seqlen_q = l.max_q;
    v->max_seqlen_k = l.max_k;
  }
}

float float_option(int64_t value, float nan_at_zero_scale) {
  if (value == 0) return std::numeric_limits<float>::quiet_NaN();
  if (value == 1) return std::numeric_limits<float>::infinity();
  return static_cast<float>(value) * nan_at_zero_scale;
}

void mutate_option(const Mutation& m, Instance* in) {
  flashattn::AttentionOptions& o = *options_of(in);
  flashattn::VarlenLayout* v = varlen_of(in);
  const int as_int = static_cast<int>(m.value);
  switch (m.dim) {
    case 0:
      o.softmax_scale = float_option(m.value, 1.f);
      break;
    case 1:
      o.window_left = as_int;
      break;
    case 2:
      o.window_right = as_int;
      break;
    case 3:
      o.softcap = float_option(m.value, -1.f);
      break;
    case 4:
      o.dropout_p = float_option(m.value, 0.01f);
      break;
    case 5:
      o.causal = (m.value & 1) != 0;
      break;
    case 6:
      if (v != nullptr) v->max_seqlen_q = as_int;
      break;
    case 7:
      if (v != nullptr) v->max_seqlen_k = as_int;
      break;
    case 8:
      in->kvcache.num_splits = as_int;
      break;
    case 9:
      in->launch.backend = static_cast<flashattn::Backend>(as_int);
      break;
    case 10:
      if (in->seed_offset == nullptr) {
        in->seed_offset = std::make_shared<std::array<uint64_t, 2>>(
            std::array<uint64_t, 2>{o.dropout_seed, o.dropout_offset});
      }
      o.dropout_seed_offset = (m.value & 1) != 0 ? in->seed_offset->data() : nullptr;
      break;
  }
}

void mutate_description(const Mutation& m, Instance* in) {
  Tensor* t = in->slot(static_cast<Slot>(m.slot % kSlotCount));
  const int dim = m.dim % flashattn::kMaxRank;
  switch (m.kind) {
    case MutationKind::kDtype:
      t->dtype = static_cast<DType>(static_cast<int32_t>(m.value));
      break;
    case MutationKind::kStride:
      t->stride[dim] = m.value;
      break;
    case MutationKind::kSize:
      t->shape[dim] = m.value;
      break;
    case MutationKind::kRank:
      t->rank = static_cast<int>(m.value);
      break;
    case MutationKind::kDevice:
      t->device.type = static_cast<flashattn::DeviceType>(static_cast<int32_t>(m.value));
      break;
    case MutationKind::kOption:
      mutate_option(m, in);
      break;
    default:
      break;  // kNull and kContent act on the memory (below)
  }
}

size_t element_bytes(DType dtype) {
  const size_t size = flashattn::dtype_size(dtype);
  return size == 0 ? 4 : size;
}

// Elements the view spans from its pointer (non-negative strides only), or -1 when that
// is more than the fuzzer allocates.
int64_t span_elements(const Tensor& t) {
  if (t.rank < 1 || t.rank > flashattn::kMaxRank) return 1;
  int64_t span = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return 1;
    if (t.shape[d] < 0) return 1;
    const int64_t stride = std::max<int64_t>(t.stride[d], 0);
    if (stride != 0 && t.shape[d] - 1 > static_cast<int64_t>(kMaxBufferBytes) / stride) return -1;
    span += (t.shape[d] - 1) * stride;
    if (span > static_cast<int64_t>(kMaxBufferBytes)) return -1;
  }
  return span;
}

void fill_values(const Tensor& t, std::mt19937& rng, int64_t elements) {
  std::normal_distribution<float> normal;
  const auto type = flashattn::core::element_type(t.dtype);
  for (int64_t n = 0; n < elements; ++n) {
    flashattn::core::store_element(t.data, n, type, normal(rng));
  }
}

void write_indices(const Tensor& t, const std::vector<int32_t>& values) {
  int32_t* data = static_cast<int32_t*>(t.data);
  const std::vector<int64_t> offsets = element_offsets(t);
  for (size_t i = 0; i < offsets.size() && i < values.size(); ++i) data[offsets[i]] = values[i];
}

const std::vector<int32_t>* index_values(Slot s, const Layout& l) {
  switch (s) {
    case kCuQ:
      return &l.cu_q;
    case kCuK:
      return &l.cu_k;
    case kUsedK:
      return &l.used_k;
    case kCacheSeqlens:
      return &l.cache_seqlens;
    case kBlockTable:
      return &l.block_table;
    case kBatchIdx:
      return &l.batch_idx;
    case kLeftpad:
      return &l.leftpad;
    default:
      return nullptr;
  }
}

// One (q, k or v) element of the inputs becomes NaN or +inf.
void poison(const Case& c, Instance* in, std::mt19937& rng) {
  const Slot s = c.poison == 4 ? kQ : c.poison == 2 ? kK : kV;
  const Tensor& t = *in->slot(s);
  const bool float_type =
      t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16 ||
      t.dtype == DType::kF8E4M3;
  if (!in->backed || !float_type || t.data == nullptr) return;
  const std::vector<int64_t> offsets = element_offsets(t);
  if (offsets.empty()) return;
  const float value = c.poison == 3 ? std::numeric_limits<float>::infinity()
                                    : std::numeric_limits<float>::quiet_NaN();
  const int64_t n = std::uniform_int_distribution<size_t>(0, offsets.size() - 1)(rng);
  flashattn::core::store_element(t.data, offsets[n], flashattn::core::element_type(t.dtype), value);
}

void back_slot(Slot s, const Layout& l, Instance* in, std::mt19937& rng) {
  Tensor& t = *in->slot(s);
  if (!t.present()) return;
  const int64_t span = span_elements(t);
  Buffer& buffer = in->buffers[s];
  switch (in->entry) {
    case Entry::kForward:
      buffer.output = s == kOut || s == kLse;
      break;
    case Entry::kBackward:
      buffer.output = s == kDq || s == kDk || s == kDv;
      break;
    case Entry::kKVCache:
      buffer.output = s == kOut || s == kLse || s == kK || s == kV;
      break;
  }
  const bool valid_dtype = flashattn::dtype_size(t.dtype) != 0;
  if (span < 0) {
    // Unbacked: a small buffer so the pointer is real; only validation may see it.
    in->backed = false;
    if (is_index(s)) in->index_unbacked = true;
    buffer.bytes.assign(2 * kGuardBytes + 64, kGuardByte);
    t.data = buffer.bytes.data() + kGuardBytes;
    return;
  }
  const size_t bytes = static_cast<size_t>(span) * element_bytes(t.dtype);
  buffer.bytes.assign(bytes + 2 * kGuardBytes, kGuardByte);
  uint8_t* data = buffer.bytes.data() + kGuardBytes;
  t.data = data;
  if (buffer.output) {
    std::memset(data, kGapByte, bytes);
  } else if (is_index(s)) {
    std::memset(data, 0, bytes);
  }
  const bool float_type =
      t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16 ||
      t.dtype == DType::kF8E4M3;
  if (valid_dtype && float_type && (!buffer.output || s == kK || s == kV))
    fill_values(t, rng, span);
  if (is_index(s) && t.dtype == DType::kI32) write_indices(t, *index_values(s, l));
}

void run_reference_forward(Instance* in) {
  const flashattn::BackwardArgs& b = in->backward;
  flashattn::ForwardArgs f;
  f.q = b.q;
  f.k = b.k;
  f.v = b.v;
  f.out = b.out;
  f.lse = b.lse;
  f.varlen = b.varlen;
  f.options = b.options;
  (void)flashattn::forward(f, {flashattn::Backend::kReference});
}

}  // namespace

Tensor* Instance::slot(Slot s) {
  static Tensor unused;  // slots an entry does not have
  switch (entry) {
    case Entry::kForward:
      switch (s) {
        case kQ:
          return &forward.q;
        case kK:
          return &forward.k;
        case kV:
          return &forward.v;
        case kOut:
          return &forward.out;
        case kLse:
          return &forward.lse;
        case kCuQ:
          return &forward.varlen.cu_seqlens_q;
        case kCuK:
          return &forward.varlen.cu_seqlens_k;
        case kUsedK:
          return &forward.varlen.seqused_k;
        case kAlibi:
          return &forward.options.alibi_slopes;
        case kQDescale:
          return &forward.descale.q;
        case kKDescale:
          return &forward.descale.k;
        case kVDescale:
          return &forward.descale.v;
        default:
          break;
      }
      break;
    case Entry::kBackward:
      switch (s) {
        case kQ:
          return &backward.q;
        case kK:
          return &backward.k;
        case kV:
          return &backward.v;
        case kOut:
          return &backward.out;
        case kLse:
          return &backward.lse;
        case kDout:
          return &backward.dout;
        case kDq:
          return &backward.dq;
        case kDk:
          return &backward.dk;
        case kDv:
          return &backward.dv;
        case kCuQ:
          return &backward.varlen.cu_seqlens_q;
        case kCuK:
          return &backward.varlen.cu_seqlens_k;
        case kUsedK:
          return &backward.varlen.seqused_k;
        case kAlibi:
          return &backward.options.alibi_slopes;
        default:
          break;
      }
      break;
    case Entry::kKVCache:
      switch (s) {
        case kQ:
          return &kvcache.q;
        case kK:
          return &kvcache.k_cache;
        case kV:
          return &kvcache.v_cache;
        case kOut:
          return &kvcache.out;
        case kLse:
          return &kvcache.lse;
        case kAlibi:
          return &kvcache.options.alibi_slopes;
        case kCacheSeqlens:
          return &kvcache.cache_seqlens;
        case kKNew:
          return &kvcache.k_new;
        case kVNew:
          return &kvcache.v_new;
        case kBlockTable:
          return &kvcache.block_table;
        case kBatchIdx:
          return &kvcache.cache_batch_idx;
        case kLeftpad:
          return &kvcache.cache_leftpad;
        case kRotaryCos:
          return &kvcache.rotary_cos;
        case kRotarySin:
          return &kvcache.rotary_sin;
        case kQDescale:
          return &kvcache.descale.q;
        case kKDescale:
          return &kvcache.descale.k;
        case kVDescale:
          return &kvcache.descale.v;
        default:
          break;
      }
      break;
  }
  unused = Tensor{};
  return &unused;
}

const Tensor* Instance::slot(Slot s) const { return const_cast<Instance*>(this)->slot(s); }

std::vector<std::vector<uint8_t>> Instance::snapshot() const {
  std::vector<std::vector<uint8_t>> bytes;
  for (const Buffer& b : buffers) bytes.push_back(b.bytes);
  return bytes;
}

std::vector<int64_t> element_offsets(const Tensor& t) {
  std::vector<int64_t> offsets;
  if (t.rank < 1 || t.rank > flashattn::kMaxRank) return offsets;
  int64_t count = 1;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 0 || t.stride[d] < 0) return offsets;
    if (t.shape[d] > static_cast<int64_t>(kMaxBufferBytes) / count) return offsets;
    count *= t.shape[d];
  }
  offsets.reserve(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    int64_t rest = n, offset = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      offset += rest % t.shape[d] * t.stride[d];
      rest /= t.shape[d];
    }
    offsets.push_back(offset);
  }
  return offsets;
}

Instance materialize(const Case& c, flashattn::Backend backend) {
  Instance in;
  in.entry = static_cast<Entry>(((c.entry % 3) + 3) % 3);
  in.launch.backend = backend;
  std::mt19937 rng(c.seed);
  const Layout l = layout_of(c, rng);
  if (in.entry == Entry::kKVCache) {
    describe_kvcache(c, l, &in);
  } else {
    describe_attention(c, l, &in);
  }
  set_options(c, l, &in);
  for (const Mutation& m : c.mutations) mutate_description(m, &in);
  for (int s = 0; s < kSlotCount; ++s) back_slot(static_cast<Slot>(s), l, &in, rng);
  if (c.poison != 0) poison(c, &in, rng);
  if (in.entry == Entry::kBackward && in.backed) run_reference_forward(&in);
  for (const Mutation& m : c.mutations) {
    Tensor* t = in.slot(static_cast<Slot>(m.slot % kSlotCount));
    if (m.kind == MutationKind::kNull) t->data = nullptr;
    // Only into a tensor whose elements lie in its buffer: an index tensor whose mutated
    // strides span more than the fuzzer allocates is unbacked (a few bytes; validation alone
    // sees it), and its element offsets point far outside them.
    if (m.kind == MutationKind::kContent && t->data != nullptr && t->dtype == DType::kI32 &&
        is_index(static_cast<Slot>(m.slot % kSlotCount))) {
      const std::vector<int64_t> offsets = element_offsets(*t);
      if (span_elements(*t) >= 0 && !offsets.empty()) {
        static_cast<int32_t*>(t->data)[offsets[m.dim % offsets.size()]] =
            static_cast<int32_t>(m.value);
      }
    }
  }
  return in;
}

}  // namespace fa_fuzz
