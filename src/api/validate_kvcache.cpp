// forward_kvcache: q, a contiguous or paged cache, an optional append (k_new/v_new),
// optional rotary, cache_batch_idx and cache_leftpad.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "api/validate_parts.hpp"

namespace flashattn::api {
namespace {

constexpr int64_t kPageMultiple = 16;
constexpr int64_t kMaxPageSize = 512;

// What validation learns about the cache beyond Sizes.
struct Cache {
  bool paged = false;
  int64_t rows = 0;        // batch_cache, or num_pages when paged
  int64_t row_length = 0;  // seqlen_cache, or page_size when paged
  int64_t max_pages = 0;   // block_table columns
  int64_t seqlen_new = 0;
  int64_t rotary_rows = 0;  // seqlen_ro
  int64_t rotary_dim = 0;

  Shape shape(const Sizes& s, int64_t dim, const char* dim_name) const {
    return {{rows, paged ? "num_pages" : "batch_cache"},
            {row_length, paged ? "page_size" : "seqlen_cache"},
            {s.nheads_k, "nheads_k"},
            {dim, dim_name}};
  }
};

std::string entry(int64_t i) { return "[" + std::to_string(i) + "]"; }

bool fp8_cache(const KVCacheArgs& a) { return a.k_cache.dtype == DType::kF8E4M3; }

Status read_q_and_cache(const KVCacheArgs& a, Sizes* s, Cache* c) {
  const char* q_layout = "[batch, seqlen_q, nheads, head_dim]";
  const char* cache_layout =
      "[batch_cache, seqlen_cache, nheads_k, head_dim], or paged "
      "[num_pages, page_size, nheads_k, head_dim]";
  FA_RETURN_IF_ERROR(expect_present(a.q, "q", q_layout));
  FA_RETURN_IF_ERROR(expect_rank(a.q, "q", 4, q_layout));
  FA_RETURN_IF_ERROR(check_storage(a.q, "q"));
  if (a.q.dtype == DType::kF8E4M3) {
    return unsupported("q",
                       "e4m3 queries are not supported with a KV cache; pass q in bf16 or fp16 "
                       "(k_cache and v_cache may be e4m3)");
  }
  FA_RETURN_IF_ERROR(expect_float_dtype(a.q, "q"));
  // The caches hold q's dtype, or both e4m3 (an FP8 cache).
  const DType cache_dtype = a.k_cache.dtype == DType::kF8E4M3 ? DType::kF8E4M3 : a.q.dtype;
  const struct {
    const Tensor& tensor;
    const char* name;
  } caches[] = {{a.k_cache, "k_cache"}, {a.v_cache, "v_cache"}};
  for (const auto& cache : caches) {
    FA_RETURN_IF_ERROR(expect_present(cache.tensor, cache.name, cache_layout));
    FA_RETURN_IF_ERROR(expect_rank(cache.tensor, cache.name, 4, cache_layout));
    FA_RETURN_IF_ERROR(check_storage(cache.tensor, cache.name));
    FA_RETURN_IF_ERROR(expect_dtype(cache.tensor, cache.name, cache_dtype));
  }
  s->batch = a.q.shape[0];
  s->seqlen_q = s->rows_q = a.q.shape[1];
  s->nheads = a.q.shape[2];
  s->head_dim = a.q.shape[3];
  s->nheads_k = a.k_cache.shape[2];
  s->head_dim_v = a.v_cache.shape[3];
  c->paged = a.block_table.present();
  c->rows = a.k_cache.shape[0];
  c->row_length = a.k_cache.shape[1];
  FA_RETURN_IF_ERROR(check_heads(s->nheads, s->nheads_k, "k_cache"));
  FA_RETURN_IF_ERROR(check_head_dims(s->head_dim, s->head_dim_v, "v_cache"));
  return check_total_q(*s);
}

Status check_paging(const KVCacheArgs& a, const Sizes& s, Cache* c) {
  if (!c->paged) {
    if (!a.cache_batch_idx.present() && c->rows < s.batch) {
      return invalid("k_cache",
                     "batch_cache >= batch=" + std::to_string(s.batch) +
                         " (without cache_batch_idx, batch entry i uses cache row i)",
                     std::to_string(c->rows));
    }
    return Status::Ok();
  }
  const int64_t page_size = c->row_length;
  if (page_size % kPageMultiple != 0 || page_size < kPageMultiple || page_size > kMaxPageSize) {
    return invalid("k_cache",
                   "page_size (dimension 1 of a paged cache) a multiple of 16 in 16..512",
                   std::to_string(page_size));
  }
  if (a.cache_batch_idx.present()) {
    return invalid("cache_batch_idx", "none with a paged cache (block_table is given)", "a tensor");
  }
  const char* name = "block_table";
  FA_RETURN_IF_ERROR(expect_rank(a.block_table, name, 2, "[batch, max_pages]"));
  FA_RETURN_IF_ERROR(check_storage(a.block_table, name));
  FA_RETURN_IF_ERROR(expect_dtype(a.block_table, name, DType::kI32));
  c->max_pages = a.block_table.shape[1];
  return expect_shape(a.block_table, name, {{s.batch, "batch"}, {c->max_pages, "max_pages"}});
}

// rotary_cos/rotary_sin [seqlen_ro, rotary_dim / 2] in q's dtype, sharing strides (the
// Params carry one row stride for both).
Status check_rotary(const KVCacheArgs& a, const Sizes& s, Cache* c) {
  FA_RETURN_IF_ERROR(expect_pair(a.rotary_cos, "rotary_cos", a.rotary_sin, "rotary_sin"));
  if (!a.rotary_cos.present()) return Status::Ok();
  const char* layout = "[seqlen_ro, rotary_dim / 2]";
  FA_RETURN_IF_ERROR(expect_rank(a.rotary_cos, "rotary_cos", 2, layout));
  FA_RETURN_IF_ERROR(check_storage(a.rotary_cos, "rotary_cos"));
  FA_RETURN_IF_ERROR(expect_dtype(a.rotary_cos, "rotary_cos", a.q.dtype));
  c->rotary_rows = a.rotary_cos.shape[0];
  c->rotary_dim = 2 * a.rotary_cos.shape[1];
  if (c->rotary_dim < 2 || c->rotary_dim > s.head_dim) {
    return invalid(
        "rotary_cos",
        std::string(layout) + " with 2 <= rotary_dim <= head_dim=" + std::to_string(s.head_dim),
        shape_text(a.rotary_cos) + " (rotary_dim=" + std::to_string(c->rotary_dim) + ")");
  }
  FA_RETURN_IF_ERROR(
      expect_tensor(a.rotary_sin, "rotary_sin", a.q.dtype,
                    {{c->rotary_rows, "seqlen_ro"}, {c->rotary_dim / 2, "rotary_dim/2"}}));
  if (c->rotary_rows > 1 && a.rotary_sin.stride[0] != a.rotary_cos.stride[0]) {
    return invalid("rotary_sin",
                   "row stride " + std::to_string(a.rotary_cos.stride[0]) + " (as rotary_cos)",
                   std::to_string(a.rotary_sin.stride[0]));
  }
  return Status::Ok();
}

Status check_structure(const KVCacheArgs& a, Sizes* s, Cache* c) {
  FA_RETURN_IF_ERROR(read_q_and_cache(a, s, c));
  FA_RETURN_IF_ERROR(check_paging(a, *s, c));
  s->seqlen_k = c->paged ? c->max_pages * c->row_length : c->row_length;
  if (s->seqlen_k > INT32_MAX) {
    return invalid("block_table", "max_pages * page_size <= 2^31-1", std::to_string(s->seqlen_k));
  }
  FA_RETURN_IF_ERROR(expect_shape(a.k_cache, "k_cache", c->shape(*s, s->head_dim, "head_dim")));
  FA_RETURN_IF_ERROR(expect_shape(a.v_cache, "v_cache", c->shape(*s, s->head_dim_v, "head_dim_v")));
  const Shape per_batch = {{s->batch, "batch"}};
  FA_RETURN_IF_ERROR(expect_tensor(a.cache_seqlens, "cache_seqlens", DType::kI32, per_batch));
  FA_RETURN_IF_ERROR(
      expect_optional_tensor(a.cache_batch_idx, "cache_batch_idx", DType::kI32, per_batch));
  FA_RETURN_IF_ERROR(
      expect_optional_tensor(a.cache_leftpad, "cache_leftpad", DType::kI32, per_batch));
  FA_RETURN_IF_ERROR(expect_pair(a.k_new, "k_new", a.v_new, "v_new"));
  if (a.k_new.present()) {
    FA_RETURN_IF_ERROR(expect_rank(a.k_new, "k_new", 4, "[batch, seqlen_new, nheads_k, head_dim]"));
    FA_RETURN_IF_ERROR(check_storage(a.k_new, "k_new"));
    c->seqlen_new = a.k_new.shape[1];
    const Dim batch{s->batch, "batch"}, rows{c->seqlen_new, "seqlen_new"},
        heads{s->nheads_k, "nheads_k"};
    FA_RETURN_IF_ERROR(expect_tensor(a.k_new, "k_new", a.q.dtype,
                                     {batch, rows, heads, {s->head_dim, "head_dim"}}));
    FA_RETURN_IF_ERROR(expect_tensor(a.v_new, "v_new", a.q.dtype,
                                     {batch, rows, heads, {s->head_dim_v, "head_dim_v"}}));
  }
  FA_RETURN_IF_ERROR(check_rotary(a, *s, c));
  if (a.num_splits < 0) {
    return invalid("num_splits", ">= 0 (0: the library picks, 1: no split)",
                   std::to_string(a.num_splits));
  }
  FA_RETURN_IF_ERROR(expect_tensor(a.out, "out", a.q.dtype, s->out()));
  FA_RETURN_IF_ERROR(expect_optional_tensor(a.lse, "lse", DType::kF32, s->lse()));
  FA_RETURN_IF_ERROR(check_options(a.options, *s));
  if (a.options.dropout_p != 0.f) {
    return invalid("options.dropout_p", "0 with a KV cache (inference only)",
                   to_text(a.options.dropout_p));
  }
  return check_descales(a.descale, false, fp8_cache(a), *s);
}

// Rows of rotary_cos/sin a batch entry reads. Positions are cache indices (FlashAttention-2):
// the new keys sit at cache_seqlens[b] + j; the queries at cache_seqlens[b] + i when a
// window or causal mask is set, else all at cache_seqlens[b].
int64_t rotary_rows_needed(const KVCacheArgs& a, const Cache& c, int64_t cached) {
  const bool positional_q =
      a.options.causal || a.options.window_left >= 0 || a.options.window_right >= 0;
  const int64_t q_rows = positional_q ? a.q.shape[1] : 1;
  return cached + std::max(q_rows, c.seqlen_new);
}

Status check_entry_contents(const KVCacheArgs& a, const Sizes& s, const Cache& c, int64_t b) {
  const int64_t cached = host_int(a.cache_seqlens, b);
  if (cached < 0) return invalid("cache_seqlens", entry(b) + " >= 0", std::to_string(cached));
  if (cached + c.seqlen_new > s.seqlen_k) {
    return invalid("cache_seqlens",
                   entry(b) + " + seqlen_new=" + std::to_string(c.seqlen_new) +
                       " <= cache capacity " + std::to_string(s.seqlen_k),
                   std::to_string(cached));
  }
  if (a.cache_leftpad.present()) {
    const int64_t pad = host_int(a.cache_leftpad, b);
    if (pad < 0 || pad > cached) {
      return invalid("cache_leftpad",
                     entry(b) + " in 0..cache_seqlens" + entry(b) + "=" + std::to_string(cached),
                     std::to_string(pad));
    }
  }
  if (a.cache_batch_idx.present()) {
    const int64_t row = host_int(a.cache_batch_idx, b);
    if (row < 0 || row >= c.rows) {
      return invalid("cache_batch_idx",
                     entry(b) + " in 0.." + std::to_string(c.rows - 1) + " (batch_cache - 1)",
                     std::to_string(row));
    }
  }
  if (c.paged) {
    const int64_t pages_used = (cached + c.seqlen_new + c.row_length - 1) / c.row_length;
    for (int64_t j = 0; j < pages_used; ++j) {
      const int64_t page = host_int(a.block_table, b, j);
      if (page < 0 || page >= c.rows) {
        return invalid("block_table",
                       "[" + std::to_string(b) + ", " + std::to_string(j) +
                           "] a page index in 0.." + std::to_string(c.rows - 1),
                       std::to_string(page));
      }
    }
  }
  if (a.rotary_cos.present()) {
    const int64_t needed = rotary_rows_needed(a, c, cached);
    if (needed > c.rotary_rows) {
      return invalid("rotary_cos",
                     "at least " + std::to_string(needed) + " rows (positions of batch entry " +
                         std::to_string(b) + " reach " + std::to_string(needed - 1) + ")",
                     std::to_string(c.rotary_rows) + " rows");
    }
  }
  return Status::Ok();
}

// Two batch entries appending into the same cache slot (the same page and row, or the same
// cache_batch_idx row and position) would leave whichever write came last: the result
// would depend on the order of the writes. Reading shared pages or rows is fine.
Status check_appends_do_not_collide(const KVCacheArgs& a, const Sizes& s, const Cache& c) {
  if (c.seqlen_new == 0 || s.batch < 2) return Status::Ok();
  struct Slot {
    int64_t row, position, entry;
    bool operator<(const Slot& o) const {
      return std::tie(row, position, entry) < std::tie(o.row, o.position, o.entry);
    }
  };
  std::vector<Slot> slots;
  slots.reserve(static_cast<size_t>(s.batch * c.seqlen_new));
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t first = host_int(a.cache_seqlens, b);
    for (int64_t t = 0; t < c.seqlen_new; ++t) {
      const int64_t position = first + t;
      if (c.paged) {
        slots.push_back({host_int(a.block_table, b, position / c.row_length),
                         position % c.row_length, b});
      } else {
        const int64_t row = a.cache_batch_idx.present() ? host_int(a.cache_batch_idx, b) : b;
        slots.push_back({row, position, b});
      }
    }
  }
  std::sort(slots.begin(), slots.end());
  for (size_t i = 1; i < slots.size(); ++i) {
    const Slot& x = slots[i - 1];
    const Slot& y = slots[i];
    if (x.row == y.row && x.position == y.position) {
      const char* name = c.paged ? "block_table" : "cache_batch_idx";
      return invalid(name,
                     "batch entries appending k_new/v_new into distinct cache slots",
                     "entries " + std::to_string(x.entry) + " and " + std::to_string(y.entry) +
                         " both append into " + (c.paged ? "page " : "cache row ") +
                         std::to_string(x.row) + ", row " + std::to_string(x.position));
    }
  }
  return Status::Ok();
}

// Device-resident indices are not read (that would need a copy and a synchronization, see
// validate_varlen.cpp); the checks that need cache_seqlens run only when it is host memory,
// which after check_placement means every tensor of the call is.
Status check_contents(const KVCacheArgs& a, const Sizes& s, const Cache& c) {
  if (a.cache_seqlens.device.type != DeviceType::kCPU) return Status::Ok();
  for (int64_t b = 0; b < s.batch; ++b) FA_RETURN_IF_ERROR(check_entry_contents(a, s, c, b));
  return check_appends_do_not_collide(a, s, c);
}

void fill_kvcache(const KVCacheArgs& a, const Sizes& s, const Cache& c, core::KVCacheParams* p) {
  fill_common(a.q, a.out, a.lse, s, p);
  p->k = operand_of(a.k_cache);
  p->v = operand_of(a.v_cache);
  fill_options(a.options, s, p);
  p->cache_seqlens = static_cast<const int32_t*>(a.cache_seqlens.data);
  p->cache_batch_idx = static_cast<const int32_t*>(a.cache_batch_idx.data);
  p->cache_leftpad = static_cast<const int32_t*>(a.cache_leftpad.data);
  if (c.paged) {
    p->block_table = static_cast<const int32_t*>(a.block_table.data);
    p->block_table_batch_stride = a.block_table.stride[0];
    p->page_size = static_cast<int>(c.row_length);
    p->max_pages = static_cast<int>(c.max_pages);
    p->num_pages = static_cast<int>(c.rows);
  }
  if (a.k_new.present()) {
    p->k_new = operand_of(a.k_new);
    p->v_new = operand_of(a.v_new);
    p->seqlen_new = static_cast<int>(c.seqlen_new);
  }
  if (a.rotary_cos.present()) {
    p->rotary_cos = a.rotary_cos.data;
    p->rotary_sin = a.rotary_sin.data;
    p->rotary_row_stride = a.rotary_cos.stride[0];
    p->rotary_dim = static_cast<int>(c.rotary_dim);
    p->rotary_seqlen = static_cast<int>(c.rotary_rows);
    p->rotary_interleaved = a.rotary_interleaved;
  }
  // 0 reaches the backend, which picks the split count from what it knows (threads or
  // SMs); see KVCacheParams::num_splits.
  p->num_splits = a.num_splits;
}

}  // namespace

Status validate_kvcache(const KVCacheArgs& a, const Target& target, core::KVCacheParams* params) {
  Sizes s;
  Cache c;
  FA_RETURN_IF_ERROR(check_structure(a, &s, &c));
  FA_RETURN_IF_ERROR(check_placement({{"q", &a.q},
                                      {"k_cache", &a.k_cache},
                                      {"v_cache", &a.v_cache},
                                      {"cache_seqlens", &a.cache_seqlens},
                                      {"k_new", &a.k_new},
                                      {"v_new", &a.v_new},
                                      {"block_table", &a.block_table},
                                      {"cache_batch_idx", &a.cache_batch_idx},
                                      {"cache_leftpad", &a.cache_leftpad},
                                      {"rotary_cos", &a.rotary_cos},
                                      {"rotary_sin", &a.rotary_sin},
                                      {"out", &a.out},
                                      {"lse", &a.lse},
                                      {"options.alibi_slopes", &a.options.alibi_slopes},
                                      {"descale.k", &a.descale.k},
                                      {"descale.v", &a.descale.v}},
                                     target));
  FA_RETURN_IF_ERROR(check_contents(a, s, c));
  // An e4m3 cache runs on every backend (the CUDA KV-cache kernel converts it on chip).
  FA_RETURN_IF_ERROR(check_backend_support(a.q.dtype, s, target, "v_cache"));
  *params = core::KVCacheParams{};
  fill_kvcache(a, s, c, params);
  fill_descales(a.descale, false, fp8_cache(a), params);
  return Status::Ok();
}

}  // namespace flashattn::api
