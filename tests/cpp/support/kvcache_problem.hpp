// One forward_kvcache problem with fresh random inputs, and its shared check: the
// backend, the exact and the low-precision reference each run on their own copy of the
// caches; out, lse and the updated caches go through the tolerance rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "support/backend_runner.hpp"
#include "support/host_tensor.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {

struct KVCacheProblem {
  int batch = 2;
  int nheads = 4;
  int nheads_k = 2;
  int seqlen_q = 1;
  int head_dim = 64;
  DType dtype = DType::kF16;
  // An e4m3 cache (q, k_new, v_new and out stay in dtype), read through random descales
  // per (batch, KV head), or one factor per tensor ([1]) with one_descale.
  bool fp8_cache = false;
  bool one_descale = false;

  int seqlen_cache = 128;          // positions per cache row (paged: rounded up to pages)
  std::vector<int> cache_seqlens;  // per batch entry; empty: random, leaving room for new
  int seqlen_new = 0;              // > 0: k_new/v_new are appended
  int page_size = 0;               // > 0: paged through a shuffled block table
  bool cache_batch_idx = false;    // entries use shuffled rows of a cache with a spare row
  std::vector<int> cache_leftpad;  // optional, per batch entry
  int rotary_dim = 0;              // > 0: rotary on q and k_new
  bool rotary_interleaved = false;

  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
  bool alibi = false;
  float softmax_scale = 0.f;
  int num_splits = 0;

  Distribution distribution = Distribution::kNormal;
  float input_scale = 1.f;
  uint32_t seed = 1;
  double eps_scale = 1.0;

  bool paged() const { return page_size > 0; }
  DType cache_dtype() const { return fp8_cache ? DType::kF8E4M3 : dtype; }
  int capacity() const;      // positions per batch entry's cache
  int batch_cache() const;   // rows of a contiguous cache
  int pages_per_row() const;
  std::string describe() const;
};

struct KVCacheInputs {
  HostTensor q, k_new, v_new;
  HostTensor k_cache, v_cache;  // as before the call
  HostTensor cache_seqlens, block_table, cache_batch_idx, cache_leftpad;
  HostTensor rotary_cos, rotary_sin;  // [capacity + seqlen_q, rotary_dim / 2]
  HostTensor alibi_slopes;
  HostTensor k_descale, v_descale;  // FP8 caches only
};
// The same seed gives the same logical cache contents whatever the layout (paged or not),
// so layouts can be compared with each other.
KVCacheInputs make_kvcache_inputs(const KVCacheProblem& problem);

struct KVCacheOutputs {
  HostTensor out, lse;          // poisoned
  HostTensor k_cache, v_cache;  // copies of the input caches, updated in place by the call
};
KVCacheOutputs make_kvcache_outputs(const KVCacheProblem& problem, const KVCacheInputs& inputs);

flashattn::KVCacheArgs kvcache_args(const KVCacheProblem& problem, const KVCacheInputs& inputs,
                                    KVCacheOutputs* outputs);

// Logical index in `cache` of element (position, head, c) of batch entry b's sequence,
// through block_table or cache_batch_idx.
int64_t cache_index(const KVCacheProblem& problem, const KVCacheInputs& inputs, int b,
                    int position, int head, int c);

CheckResult check_kvcache(const KVCacheProblem& problem, const Runner& runner);
// The same on inputs the caller made (make_kvcache_inputs, then changed).
CheckResult check_kvcache(const KVCacheProblem& problem, const Runner& runner,
                          const KVCacheInputs& inputs);

}  // namespace fa_test
