// The tiled CPU forward_kvcache against the reference (out, lse and the updated caches
// under the tolerance rule): append, paged caches, rotary, cache_batch_idx, leftpad,
// masks and split-KV, once per supported ISA.
#include <vector>

#include "support/kvcache_problem.hpp"
#include "test_cpu_backend_support.hpp"

namespace fa_test {
namespace {

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

KVCacheProblem decode_problem(DType dtype, uint32_t seed) {
  KVCacheProblem p;
  p.dtype = dtype;
  p.batch = 3;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 1;
  p.head_dim = 64;
  p.seqlen_cache = 300;
  p.seed = seed;
  return p;
}

using CpuKVCache = CpuBackend;

TEST_P(CpuKVCache, DecodeAllDtypes) {
  uint32_t seed = 2000;
  for (DType dtype : kDtypes) {
    KVCacheProblem p = decode_problem(dtype, seed++);
    expect_passes(check_kvcache(p, cpu()));
    p.seqlen_new = 1;
    expect_passes(check_kvcache(p, cpu()));
  }
}

TEST_P(CpuKVCache, AppendSeveralWithCausalAndWindow) {
  uint32_t seed = 2010;
  for (DType dtype : kDtypes) {
    KVCacheProblem p = decode_problem(dtype, seed++);
    p.seqlen_q = 5;
    p.seqlen_new = 5;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
    p.causal = false;
    p.window_left = 30;
    p.window_right = 0;
    expect_passes(check_kvcache(p, cpu()));
    p.seqlen_q = 130;  // a prefill longer than a query block
    p.seqlen_new = 130;
    p.seqlen_cache = 400;
    p.window_left = -1;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
  }
}

TEST_P(CpuKVCache, PagedCaches) {
  uint32_t seed = 2030;
  for (int page_size : {16, 32, 256}) {
    for (DType dtype : kDtypes) {
      KVCacheProblem p = decode_problem(dtype, seed++);
      p.page_size = page_size;
      p.seqlen_new = 3;
      p.seqlen_q = 3;
      p.causal = page_size == 32;
      expect_passes(check_kvcache(p, cpu()));
    }
  }
}

TEST_P(CpuKVCache, RotaryBothPairings) {
  uint32_t seed = 2060;
  for (bool interleaved : {false, true}) {
    for (bool causal : {false, true}) {
      for (DType dtype : kDtypes) {
        KVCacheProblem p = decode_problem(dtype, seed++);
        p.seqlen_q = 4;
        p.seqlen_new = 4;
        p.rotary_dim = causal ? 64 : 32;  // all of d, or a part
        p.rotary_interleaved = interleaved;
        p.causal = causal;
        expect_passes(check_kvcache(p, cpu()));
      }
    }
  }
}

TEST_P(CpuKVCache, CacheBatchIdxAndLeftpad) {
  uint32_t seed = 2090;
  for (DType dtype : kDtypes) {
    KVCacheProblem p = decode_problem(dtype, seed++);
    p.cache_batch_idx = true;
    p.seqlen_new = 2;
    p.seqlen_q = 2;
    expect_passes(check_kvcache(p, cpu()));
    p.cache_batch_idx = false;
    p.cache_seqlens = {100, 250, 17};
    p.cache_leftpad = {10, 0, 17};  // the last entry keeps only its new keys
    p.rotary_dim = 16;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
    p.page_size = 16;
    expect_passes(check_kvcache(p, cpu()));
  }
}

TEST_P(CpuKVCache, AlibiSoftcapGqa) {
  uint32_t seed = 2120;
  for (DType dtype : kDtypes) {
    KVCacheProblem p = decode_problem(dtype, seed++);
    p.nheads = 8;
    p.nheads_k = 1;
    p.seqlen_q = 3;
    p.seqlen_new = 3;
    p.alibi = true;
    p.softcap = 6.f;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
  }
}

TEST_P(CpuKVCache, SplitKvEqualsTheReference) {
  uint32_t seed = 2140;
  for (int splits : {0, 1, 2, 3, 7, 64}) {
    for (DType dtype : kDtypes) {
      KVCacheProblem p = decode_problem(dtype, seed++);
      p.batch = 1;
      p.nheads = 2;
      p.nheads_k = 1;
      p.seqlen_cache = 700;
      p.seqlen_new = 2;
      p.seqlen_q = 2;
      p.num_splits = splits;
      p.causal = splits % 2 == 1;
      expect_passes(check_kvcache(p, cpu()));
    }
  }
}

TEST_P(CpuKVCache, HeadDims) {
  uint32_t seed = 2170;
  for (int d : {1, 8, 40, 80, 128, 256}) {
    KVCacheProblem p = decode_problem(kDtypes[seed % 3], seed);
    ++seed;
    p.head_dim = d;
    p.seqlen_new = 2;
    p.seqlen_q = 2;
    p.rotary_dim = d % 2 == 0 ? d : 0;
    expect_passes(check_kvcache(p, cpu()));
  }
}

// A task packs the query heads of a GQA group side by side; a group wider than the
// task's query blocks is served in rounds.
TEST_P(CpuKVCache, WideGqaGroups) {
  uint32_t seed = 2190;
  for (int nheads : {24, 400}) {
    KVCacheProblem p = decode_problem(DType::kBF16, seed++);
    p.batch = 2;
    p.nheads = nheads;
    p.nheads_k = 1;
    p.head_dim = 16;
    p.seqlen_q = 2;
    p.seqlen_new = 2;
    p.alibi = true;
    p.causal = true;
    expect_passes(check_kvcache(p, cpu()));
  }
}

FA_INSTANTIATE_PER_ISA(CpuKVCache);

}  // namespace
}  // namespace fa_test
