// The reference forward_kvcache against facts that do not depend on it: naive attention
// over the keys docs/contract.md names (cached positions [leftpad, cache_seqlens) then the new
// ones), appends that touch nothing else, paged = contiguous, rotary = inputs rotated by
// hand before the call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "flashattn/flashattn.hpp"
#include "support/kvcache_problem.hpp"
#include "support/naive_attention.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;
using flashattn::Status;

constexpr flashattn::Launch kReference{Backend::kReference};

struct CacheRun {
  KVCacheInputs in;
  KVCacheOutputs out;
};

CacheRun run_reference(const KVCacheProblem& p) {
  CacheRun run;
  run.in = make_kvcache_inputs(p);
  run.out = make_kvcache_outputs(p, run.in);
  const Status status = flashattn::forward_kvcache(kvcache_args(p, run.in, &run.out), kReference);
  EXPECT_TRUE(status.ok()) << p.describe() << ": " << status.message();
  return run;
}

KVCacheProblem fp32_problem(uint32_t seed) {
  KVCacheProblem p;
  p.dtype = DType::kF32;
  p.batch = 3;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 3;
  p.head_dim = 16;
  p.seqlen_cache = 64;
  p.cache_seqlens = {5, 0, 40};
  p.seqlen_new = 3;
  p.seed = seed;
  return p;
}

int leftpad_of(const KVCacheProblem& p, int b) {
  return p.cache_leftpad.empty() ? 0 : p.cache_leftpad[b];
}

// Keys (or values) of batch entry b, head hk, from the inputs before the call.
Rows sequence_rows(const KVCacheProblem& p, const KVCacheInputs& in, const HostTensor& cache,
                   const HostTensor& fresh, int b, int hk) {
  const int cached = static_cast<int>(in.cache_seqlens.get(b));
  Rows rows;
  for (int position = leftpad_of(p, b); position < cached; ++position) {
    std::vector<double> row(p.head_dim);
    for (int c = 0; c < p.head_dim; ++c) row[c] = cache.get(cache_index(p, in, b, position, hk, c));
    rows.push_back(row);
  }
  if (p.seqlen_new > 0) {
    for (auto& row : head_rows(fresh, b, hk, 0, p.seqlen_new)) rows.push_back(row);
  }
  return rows;
}

::testing::AssertionResult matches_naive(const KVCacheProblem& p, const CacheRun& run,
                                         double tolerance) {
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.nheads; ++h) {
      const int hk = h / (p.nheads / p.nheads_k);
      NaiveOptions options;
      options.scale = p.softmax_scale;
      options.window_left = p.window_left;
      options.window_right = p.causal ? 0 : p.window_right;
      options.softcap = p.softcap;
      if (p.alibi) options.alibi_slope = run.in.alibi_slopes.get(h);
      const NaiveResult expected = naive_attention(
          head_rows(run.in.q, b, h, 0, p.seqlen_q),
          sequence_rows(p, run.in, run.in.k_cache, run.in.k_new, b, hk),
          sequence_rows(p, run.in, run.in.v_cache, run.in.v_new, b, hk), p.head_dim, options);
      const Rows got = head_rows(run.out.out, b, h, 0, p.seqlen_q);
      for (int i = 0; i < p.seqlen_q; ++i) {
        const double lse = run.out.lse.get((int64_t(b) * p.nheads + h) * p.seqlen_q + i);
        const bool lse_ok = std::isinf(expected.lse[i])
                                ? lse == expected.lse[i]
                                : std::fabs(lse - expected.lse[i]) <=
                                      tolerance * std::max(1.0, std::fabs(expected.lse[i]));
        if (!lse_ok) {
          return ::testing::AssertionFailure() << "lse of batch " << b << " head " << h << " row "
                                               << i << ": " << lse << " vs " << expected.lse[i];
        }
        for (int c = 0; c < p.head_dim; ++c) {
          if (std::fabs(got[i][c] - expected.out[i][c]) >
              tolerance * std::max(1.0, std::fabs(expected.out[i][c]))) {
            return ::testing::AssertionFailure()
                   << "out of batch " << b << " head " << h << " row " << i << " dim " << c
                   << ": " << got[i][c] << " vs " << expected.out[i][c];
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void expect_matches_naive(const KVCacheProblem& p, double tolerance = 2e-6) {
  const CacheRun run = run_reference(p);
  EXPECT_TRUE(matches_naive(p, run, tolerance)) << p.describe();
}

TEST(ReferenceKVCache, MatchesNaiveOverCachedThenNewKeys) {
  uint32_t seed = 401;
  for (bool causal : {false, true}) {
    for (int seqlen_new : {0, 3}) {
      KVCacheProblem p = fp32_problem(seed++);
      p.causal = causal;
      p.seqlen_new = seqlen_new;
      expect_matches_naive(p);
    }
  }
}

TEST(ReferenceKVCache, MasksAndBiasesUseLogicalKeyIndices) {
  KVCacheProblem p = fp32_problem(410);
  p.window_left = 6;
  p.window_right = 1;
  p.alibi = true;
  p.softcap = 4.f;
  p.input_scale = 2.f;
  expect_matches_naive(p);
  p.cache_leftpad = {2, 0, 33};
  expect_matches_naive(p);
  p.causal = true;
  p.window_left = p.window_right = -1;
  p.cache_leftpad = {5, 0, 40};  // entries 0 and 2: only the new keys are left
  expect_matches_naive(p);
}

TEST(ReferenceKVCache, CacheBatchIdxPicksTheRowAndPagedFollowsTheBlockTable) {
  KVCacheProblem p = fp32_problem(420);
  p.cache_batch_idx = true;
  expect_matches_naive(p);
  p.cache_batch_idx = false;
  p.page_size = 16;
  expect_matches_naive(p);
}

TEST(ReferenceKVCache, EmptyCacheAttendsOnlyTheNewKeysOrNothing) {
  KVCacheProblem p = fp32_problem(430);
  p.cache_seqlens = {0, 0, 0};
  expect_matches_naive(p);
  p.seqlen_new = 0;
  const CacheRun run = run_reference(p);
  EXPECT_EQ(max_abs(run.out.out), 0.0);
  for (int64_t n = 0; n < run.out.lse.numel(); ++n) {
    EXPECT_EQ(run.out.lse.get(n), -std::numeric_limits<float>::infinity());
  }
}

// The caches of `run` as they must be after the append: the inputs' caches with the new
// rows (rotated by `rotated_new` when given) at cache_seqlens[b] + t.
void expect_only_new_positions_written(const KVCacheProblem& p, const CacheRun& run,
                                       const HostTensor* rotated_k_new = nullptr) {
  HostTensor expected_k = run.in.k_cache, expected_v = run.in.v_cache;
  const HostTensor& k_new = rotated_k_new != nullptr ? *rotated_k_new : run.in.k_new;
  for (int b = 0; b < p.batch; ++b) {
    const int cached = static_cast<int>(run.in.cache_seqlens.get(b));
    for (int t = 0; t < p.seqlen_new; ++t) {
      for (int h = 0; h < p.nheads_k; ++h) {
        for (int c = 0; c < p.head_dim; ++c) {
          const int64_t to = cache_index(p, run.in, b, cached + t, h, c);
          const int64_t from = ((int64_t(b) * p.seqlen_new + t) * p.nheads_k + h) * p.head_dim + c;
          expected_k.set(to, k_new.get(from));
          expected_v.set(to, run.in.v_new.get(from));
        }
      }
    }
  }
  EXPECT_EQ(run.out.k_cache.raw_bytes(), expected_k.raw_bytes()) << p.describe();
  EXPECT_EQ(run.out.v_cache.raw_bytes(), expected_v.raw_bytes()) << p.describe();
}

TEST(ReferenceKVCache, AppendWritesTheNewPositionsAndNothingElse) {
  KVCacheProblem p = fp32_problem(440);
  p.dtype = DType::kF16;
  p.cache_seqlens = {5, 0, 61};  // the last entry fills the cache to its end
  expect_only_new_positions_written(p, run_reference(p));
  p.cache_batch_idx = true;  // the spare cache row stays untouched
  expect_only_new_positions_written(p, run_reference(p));
  p.cache_batch_idx = false;
  p.page_size = 16;
  expect_only_new_positions_written(p, run_reference(p));
}

TEST(ReferenceKVCache, PagedEqualsContiguous) {
  for (int page_size : {16, 256}) {
    KVCacheProblem contiguous = fp32_problem(450);
    contiguous.dtype = DType::kBF16;
    contiguous.seqlen_cache = 512;  // whole pages of both sizes: the same logical cache
    contiguous.cache_seqlens = {17, 0, 300};
    contiguous.seqlen_new = 5;
    contiguous.seqlen_q = 5;
    contiguous.causal = true;
    contiguous.rotary_dim = 8;
    contiguous.cache_leftpad = {3, 0, 100};
    KVCacheProblem paged = contiguous;
    paged.page_size = page_size;
    const CacheRun a = run_reference(contiguous);
    const CacheRun b = run_reference(paged);
    EXPECT_EQ(max_abs_diff(a.out.out, b.out.out), 0.0) << "page size " << page_size;
    EXPECT_EQ(max_abs_diff(a.out.lse, b.out.lse), 0.0) << "page size " << page_size;
    for (int e = 0; e < contiguous.batch; ++e) {
      for (int position = 0; position < contiguous.seqlen_cache; ++position) {
        for (int c = 0; c < contiguous.head_dim; ++c) {
          const int64_t in_a = cache_index(contiguous, a.in, e, position, 1, c);
          const int64_t in_b = cache_index(paged, b.in, e, position, 1, c);
          ASSERT_EQ(a.out.k_cache.get(in_a), b.out.k_cache.get(in_b));
          ASSERT_EQ(a.out.v_cache.get(in_a), b.out.v_cache.get(in_b));
        }
      }
    }
  }
}

// Rotates row `row` (of `dim` elements starting at element `start`) of `t` to `position`,
// by hand: pairs (2i, 2i+1) when interleaved, (i, i + rotary_dim/2) otherwise.
void rotate_by_hand(const KVCacheProblem& p, const KVCacheInputs& in, HostTensor* t,
                    int64_t start, int position) {
  const int half = p.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double c = in.rotary_cos.get(int64_t(position) * half + i);
    const double s = in.rotary_sin.get(int64_t(position) * half + i);
    const int64_t first = start + (p.rotary_interleaved ? 2 * i : i);
    const int64_t second = start + (p.rotary_interleaved ? 2 * i + 1 : i + half);
    const double x0 = t->get(first), x1 = t->get(second);
    t->set(first, static_cast<float>(x0 * c - x1 * s));
    t->set(second, static_cast<float>(x0 * s + x1 * c));
  }
}

TEST(ReferenceKVCache, RotaryEqualsInputsRotatedByHand) {
  uint32_t seed = 460;
  for (bool interleaved : {false, true}) {
    for (bool causal : {false, true}) {
      KVCacheProblem p = fp32_problem(seed++);
      p.dtype = DType::kF16;
      p.head_dim = 32;
      p.rotary_dim = 16;
      p.rotary_interleaved = interleaved;
      p.causal = causal;
      p.seqlen_q = 4;
      p.seqlen_new = 4;
      p.cache_seqlens = {3, 0, 50};
      p.cache_leftpad = {1, 0, 20};  // positions stay absolute
      const CacheRun rotary = run_reference(p);

      // The same call without rotary, on q and k_new rotated here.
      KVCacheProblem plain = p;
      plain.rotary_dim = 0;
      CacheRun prerotated;
      prerotated.in = rotary.in;
      for (int b = 0; b < p.batch; ++b) {
        const int cached = static_cast<int>(rotary.in.cache_seqlens.get(b));
        for (int i = 0; i < p.seqlen_q; ++i) {
          // FlashAttention-2: every query row sits at cache_seqlens[b] unless the attention
          // is causal or windowed.
          const int position = cached + (causal ? i : 0);
          for (int h = 0; h < p.nheads; ++h) {
            const int64_t start = ((int64_t(b) * p.seqlen_q + i) * p.nheads + h) * p.head_dim;
            rotate_by_hand(p, rotary.in, &prerotated.in.q, start, position);
          }
        }
        for (int t = 0; t < p.seqlen_new; ++t) {
          for (int h = 0; h < p.nheads_k; ++h) {
            const int64_t start = ((int64_t(b) * p.seqlen_new + t) * p.nheads_k + h) * p.head_dim;
            rotate_by_hand(p, rotary.in, &prerotated.in.k_new, start, cached + t);
          }
        }
      }
      prerotated.out = make_kvcache_outputs(plain, prerotated.in);
      ASSERT_TRUE(flashattn::forward_kvcache(kvcache_args(plain, prerotated.in, &prerotated.out),
                                             kReference).ok());
      EXPECT_EQ(max_abs_diff(rotary.out.out, prerotated.out.out), 0.0) << p.describe();
      EXPECT_EQ(max_abs_diff(rotary.out.lse, prerotated.out.lse), 0.0) << p.describe();
      expect_only_new_positions_written(p, rotary, &prerotated.in.k_new);
    }
  }
}

TEST(ReferenceKVCache, NumSplitsDoNotChangeTheResult) {
  KVCacheProblem p = fp32_problem(470);
  p.dtype = DType::kF16;
  p.causal = true;
  const CacheRun unsplit = [&] {
    KVCacheProblem one = p;
    one.num_splits = 1;
    return run_reference(one);
  }();
  for (int splits : {0, 3}) {
    p.num_splits = splits;
    const CacheRun split = run_reference(p);
    EXPECT_EQ(max_abs_diff(unsplit.out.out, split.out.out), 0.0) << splits;
    EXPECT_EQ(max_abs_diff(unsplit.out.lse, split.out.lse), 0.0) << splits;
  }
}

}  // namespace
}  // namespace fa_test
