// Many host threads calling the CUDA backend at once, each on streams of its own (the
// device runner makes one per call), get the same bits as the same calls made one at a
// time: forward, deterministic backward and KV cache (contiguous, paged, split). Run alone
// in a fresh process (--gtest_filter='CudaConcurrency.*') so that the first calls race to
// fill the library's per-device caches (device limits, kernel attributes).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "cuda_test_support.hpp"
#include "support/kvcache_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::HostTensor;
constexpr int kThreads = 8;
constexpr int kRounds = 3;

fa_test::Problem problem_of(int t) {
  fa_test::Problem p =
      dense_problem(t % 2 ? flashattn::DType::kBF16 : flashattn::DType::kF16,
                    {1 + t % 2, 8, 2 + 2 * (t % 2), 300 + 61 * t, 500 + 37 * t, t % 3 ? 128 : 64},
                    6000 + t);
  p.causal = t % 2 == 1;
  p.dropout_p = t % 4 == 3 ? 0.1f : 0.f;
  return p;
}

fa_test::KVCacheProblem kvcache_problem_of(int t) {
  fa_test::KVCacheProblem p;
  p.dtype = flashattn::DType::kBF16;
  p.batch = 3;
  p.nheads = 16;
  p.nheads_k = 4;
  p.seqlen_q = 1 + 3 * (t % 2);
  p.seqlen_new = 1;
  p.seqlen_cache = 2048;
  p.head_dim = 128;
  p.page_size = t % 2 ? 64 : 0;
  p.num_splits = t % 3;
  p.causal = true;
  p.seed = 6100 + t;
  return p;
}

struct Result {
  fa_test::Outputs attention;
  fa_test::KVCacheOutputs kvcache;
};

Result run(int t) {
  const fa_test::Runner cuda = deterministic_runner();
  const fa_test::Problem p = problem_of(t);
  const fa_test::Inputs in = fa_test::make_inputs(p);
  Result r{fa_test::make_outputs(p), {}};
  EXPECT_TRUE(cuda.forward(fa_test::forward_args(p, in, &r.attention)).ok());
  EXPECT_TRUE(cuda.backward(fa_test::backward_args(p, in, &r.attention)).ok());
  const fa_test::KVCacheProblem kp = kvcache_problem_of(t);
  const fa_test::KVCacheInputs kin = fa_test::make_kvcache_inputs(kp);
  r.kvcache = fa_test::make_kvcache_outputs(kp, kin);
  EXPECT_TRUE(cuda.forward_kvcache(fa_test::kvcache_args(kp, kin, &r.kvcache)).ok());
  return r;
}

void expect_same_bits(const Result& a, const Result& b, int t) {
  const auto same = [](const HostTensor& x, const HostTensor& y) {
    return x.raw_bytes() == y.raw_bytes();
  };
  EXPECT_TRUE(same(a.attention.out, b.attention.out)) << "thread " << t << ": out";
  EXPECT_TRUE(same(a.attention.lse, b.attention.lse)) << "thread " << t << ": lse";
  EXPECT_TRUE(same(a.attention.dq, b.attention.dq)) << "thread " << t << ": dq";
  EXPECT_TRUE(same(a.attention.dk, b.attention.dk)) << "thread " << t << ": dk";
  EXPECT_TRUE(same(a.attention.dv, b.attention.dv)) << "thread " << t << ": dv";
  EXPECT_TRUE(same(a.kvcache.out, b.kvcache.out)) << "thread " << t << ": kvcache out";
  EXPECT_TRUE(same(a.kvcache.lse, b.kvcache.lse)) << "thread " << t << ": kvcache lse";
  EXPECT_TRUE(same(a.kvcache.k_cache, b.kvcache.k_cache)) << "thread " << t << ": k_cache";
}

using CudaConcurrency = CudaTest;

TEST_F(CudaConcurrency, ThreadsOnTheirOwnStreamsGiveTheBitsOfSerialCalls) {
  std::vector<std::vector<Result>> concurrent(kThreads, std::vector<Result>(kRounds));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &concurrent] {
      for (int round = 0; round < kRounds; ++round) concurrent[t][round] = run(t);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    const Result serial = run(t);
    for (int round = 0; round < kRounds; ++round) expect_same_bits(concurrent[t][round], serial, t);
  }
}

}  // namespace
}  // namespace fa_cuda_test
