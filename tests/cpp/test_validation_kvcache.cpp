// Validation of forward_kvcache: contiguous and paged caches, appends, rotary, indices.
#include <gtest/gtest.h>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::StatusCode;
using flashattn::Tensor;

KVCacheShape paged(int64_t page_size, int64_t pages = 2) {
  KVCacheShape s;
  s.paged = true;
  s.page_size = page_size;
  s.seqlen_cache = page_size * pages;
  return s;
}

TEST(ValidationKVCache, ValidCallsPass) {
  for (const KVCacheShape& s :
       {KVCacheShape{}, KVCacheShape{false, 16, 32, 0}, paged(16), paged(48), paged(512, 1),
        KVCacheShape{false, 16, 32, 2, true, 8}}) {
    KVCacheCase c(s);
    EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
  }
}

TEST(ValidationKVCache, PageSizeMustBeAMultipleOf16UpTo512) {
  for (int64_t page_size : {8, 24, 528}) {
    KVCacheCase c(paged(page_size));
    EXPECT_TRUE(Rejected(check(c.args), kInvalid, "k_cache", "multiple of 16")) << page_size;
  }
}

TEST(ValidationKVCache, BlockTableShapeAndDtype) {
  KVCacheCase c(paged(16));
  HostTensor wrong_batch(DType::kI32, {c.p.batch + 1, 2});
  c.args.block_table = wrong_batch.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "block_table", "batch=2"));
  HostTensor floats(DType::kF32, {c.p.batch, 2});
  c.args.block_table = floats.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "block_table", "dtype int32"));
}

TEST(ValidationKVCache, BlockTableEntryOutOfRange) {
  KVCacheCase c(paged(16));
  c.block_table.set(1, 99);  // batch 0, page 1: cache_seqlens[0] + 2 = 5 uses page 0 only
  EXPECT_TRUE(check(c.args).ok()) << "unused pages are not read: " << check(c.args).message();
  c.block_table.set(0, 99);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "block_table", "[0, 0]"));
}

// Entries may share pages or cache rows to read them (a shared prefix), but two entries
// appending into the same slot would leave an order-dependent result: refused.
TEST(ValidationKVCache, AppendsIntoOneSlotFromTwoEntries) {
  KVCacheCase c(paged(16));  // entries append at positions 3, 4 and 10, 11
  c.block_table.set(2, c.block_table.get(0));  // entry 1's first page is entry 0's
  EXPECT_TRUE(check(c.args).ok()) << "a shared page: " << check(c.args).message();
  c.cache_seqlens.set(1, 4);  // entry 1 now appends into rows 4, 5 of that page
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "block_table", "entries 0 and 1"));

  KVCacheCase rows(KVCacheShape{});
  HostTensor same_row = fa_test::int32_tensor({0, 0});
  rows.args.cache_batch_idx = same_row.view();
  EXPECT_TRUE(check(rows.args).ok()) << check(rows.args).message();
  rows.cache_seqlens.set(1, 4);
  EXPECT_TRUE(Rejected(check(rows.args), kInvalid, "cache_batch_idx", "cache row 0, row 4"));
}

TEST(ValidationKVCache, CacheBatchIdxOnlyWithoutPaging) {
  KVCacheCase c(paged(16));
  HostTensor idx = fa_test::int32_tensor({0, 1});
  c.args.cache_batch_idx = idx.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_batch_idx", "paged"));
}

TEST(ValidationKVCache, CacheBatchIdxOutOfRange) {
  KVCacheCase c;
  HostTensor idx = fa_test::int32_tensor({1, 2});
  c.args.cache_batch_idx = idx.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_batch_idx", "[1] in 0..1"));
}

TEST(ValidationKVCache, CacheSmallerThanTheBatchNeedsCacheBatchIdx) {
  Problem p;
  p.batch = 3;
  KVCacheCase c({}, p);
  HostTensor small(p.dtype, {2, 32, p.nheads_k, p.head_dim});
  c.args.k_cache = small.view();
  c.args.v_cache = small.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "k_cache", "batch_cache >= batch=3"));
  HostTensor idx = fa_test::int32_tensor({1, 0, 1});
  c.args.cache_batch_idx = idx.view();
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
}

TEST(ValidationKVCache, CacheSeqlensRequiredInt32PerBatch) {
  KVCacheCase c;
  c.args.cache_seqlens = Tensor{};
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_seqlens", "got none"));
  HostTensor floats = fa_test::float_tensor({1, 2});
  c.args.cache_seqlens = floats.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_seqlens", "dtype int32"));
}

TEST(ValidationKVCache, AppendBeyondTheCapacity) {
  KVCacheCase c;
  c.cache_seqlens.set(1, 31);  // + seqlen_new 2 > 32
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_seqlens", "capacity 32"));
  c.cache_seqlens.set(1, -1);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_seqlens", ">= 0"));
}

TEST(ValidationKVCache, LeftpadBeyondCacheSeqlens) {
  KVCacheCase c;
  HostTensor pad = fa_test::int32_tensor({4, 0});  // cache_seqlens[0] = 3
  c.args.cache_leftpad = pad.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "cache_leftpad", "[0] in 0..cache_seqlens[0]=3"));
}

TEST(ValidationKVCache, KNewAndVNewBothOrNeither) {
  KVCacheCase c;
  c.args.v_new = Tensor{};
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "v_new", "k_new"));
  KVCacheCase d;
  d.args.k_new = Tensor{};
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "k_new", "v_new"));
}

TEST(ValidationKVCache, KNewShapeAndDtype) {
  KVCacheCase c;
  c.args.v_new.shape[1] = 3;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "v_new", "seqlen_new=2"));
  KVCacheCase d;
  d.args.k_new.dtype = DType::kF16;
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "k_new", "dtype fp32"));
}

TEST(ValidationKVCache, VCacheShape) {
  KVCacheCase c;
  c.args.v_cache.shape[1] = 31;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "v_cache", "seqlen_cache=32"));
}

TEST(ValidationKVCache, NheadsKMustDivideNheads) {
  Problem p;
  p.nheads = 6;
  p.nheads_k = 4;
  KVCacheCase c({}, p);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "k_cache", "nheads_k dividing nheads=6, got 4"));
}

TEST(ValidationKVCache, RotaryCosAndSinBothOrNeither) {
  KVCacheCase c(KVCacheShape{false, 16, 32, 2, true, 8});
  c.args.rotary_sin = Tensor{};
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "rotary_sin", "rotary_cos"));
}

TEST(ValidationKVCache, RotaryDimAtMostHeadDim) {
  Problem p;
  p.head_dim = 8;
  KVCacheCase c(KVCacheShape{false, 16, 32, 2, true, 10}, p);
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "rotary_cos", "rotary_dim <= head_dim=8"));
}

TEST(ValidationKVCache, RotarySinMatchesCos) {
  KVCacheCase c(KVCacheShape{false, 16, 32, 2, true, 8});
  HostTensor narrow(c.p.dtype, {32, 2});
  c.args.rotary_sin = narrow.view();
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "rotary_sin", "rotary_dim/2=4"));
}

TEST(ValidationKVCache, RotaryTableTooShortForThePositions) {
  KVCacheCase c(KVCacheShape{false, 16, 32, 2, true, 8});
  c.args.rotary_cos.shape[0] = 11;
  c.args.rotary_sin.shape[0] = 11;  // cache_seqlens[1] = 10, + 2 new keys: 12 rows
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "rotary_cos", "at least 12 rows"));
}

TEST(ValidationKVCache, NegativeNumSplits) {
  KVCacheCase c;
  c.args.num_splits = -1;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "num_splits", ">= 0"));
  c.args.num_splits = 3;
  EXPECT_TRUE(check(c.args).ok()) << check(c.args).message();
}

TEST(ValidationKVCache, OutAndLseShapes) {
  KVCacheCase c;
  c.args.out.shape[2] = 3;
  EXPECT_TRUE(Rejected(check(c.args), kInvalid, "out", "nheads=4"));
  KVCacheCase d;
  d.args.lse.dtype = DType::kF16;
  EXPECT_TRUE(Rejected(check(d.args), kInvalid, "lse", "dtype fp32"));
}

}  // namespace
}  // namespace api_test
