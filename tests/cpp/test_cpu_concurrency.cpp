// Many host threads calling the CPU backend at once (each with its own OpenMP team) get
// the same bits as the same calls made one at a time: forward, backward and KV cache, on
// problems of different shapes so the threads' tiles and schedules differ. The first calls
// race to initialize the kernel table (selected_kernels) too.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "support/kvcache_problem.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

constexpr flashattn::Launch kCpu{flashattn::Backend::kCpu};
constexpr int kThreads = 8;

Problem problem_of(int t) {
  Problem p;
  p.dtype = t % 3 == 0 ? DType::kF32 : t % 3 == 1 ? DType::kF16 : DType::kBF16;
  p.batch = 1 + t % 2;
  p.nheads = 4;
  p.nheads_k = 1 + t % 2;
  p.seqlen_q = 70 + 13 * t;
  p.seqlen_k = 90 + 7 * t;
  p.head_dim = t % 2 == 0 ? 64 : 40;
  p.causal = t % 2 == 1;
  p.dropout_p = t % 4 == 3 ? 0.1f : 0.f;
  p.seed = 4000 + t;
  return p;
}

KVCacheProblem kvcache_problem_of(int t) {
  KVCacheProblem p;
  p.dtype = DType::kF16;
  p.batch = 2;
  p.nheads = 8;
  p.nheads_k = 2;
  p.seqlen_q = 1 + t % 3;
  p.seqlen_new = 1 + t % 3;
  p.seqlen_cache = 300;
  p.page_size = t % 2 == 0 ? 16 : 0;
  p.num_splits = t % 3;
  p.causal = true;
  p.seed = 4100 + t;
  return p;
}

struct Result {
  Outputs attention;
  KVCacheOutputs kvcache;
};

Result run(int t) {
  const Problem p = problem_of(t);
  const Inputs in = make_inputs(p);
  Result r{make_outputs(p), {}};
  EXPECT_TRUE(flashattn::forward(forward_args(p, in, &r.attention), kCpu).ok());
  EXPECT_TRUE(flashattn::backward(backward_args(p, in, &r.attention), kCpu).ok());
  const KVCacheProblem kp = kvcache_problem_of(t);
  const KVCacheInputs kin = make_kvcache_inputs(kp);
  r.kvcache = make_kvcache_outputs(kp, kin);
  EXPECT_TRUE(flashattn::forward_kvcache(kvcache_args(kp, kin, &r.kvcache), kCpu).ok());
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
  EXPECT_TRUE(same(a.kvcache.k_cache, b.kvcache.k_cache)) << "thread " << t << ": k_cache";
}

TEST(CpuConcurrency, ThreadsGiveTheBitsOfSerialCalls) {
  std::vector<Result> concurrent(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &concurrent] { concurrent[t] = run(t); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) expect_same_bits(concurrent[t], run(t), t);
}

}  // namespace
}  // namespace fa_test
