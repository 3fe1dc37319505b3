// What the CUDA backend cannot run must be refused as kUnsupported, through supported()
// and through the entry point, with a message naming the feature: never run silently.
// When a kernel lands, its entry here moves into the feature suites (on cuda_runner()).
#include <algorithm>
#include <cctype>
#include <functional>
#include <ostream>
#include <string>

#include "cuda_test_support.hpp"
#include "support/kvcache_problem.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Runner;
using flashattn::Status;

struct Refusal {
  const char* feature;
  const char* message_word;  // the message must contain it, case aside
  std::function<Status(const Runner&)> call;
};

void PrintTo(const Refusal& refusal, std::ostream* os) { *os << refusal.feature; }

Status forward_of(const fa_test::Problem& p, const Runner& runner) {
  const fa_test::Inputs inputs = fa_test::make_inputs(p);
  fa_test::Outputs outputs = fa_test::make_outputs(p);
  return runner.forward(fa_test::forward_args(p, inputs, &outputs));
}

// Permanent: docs/contract.md has fp16 and bf16 on the GPU, fp32 on the CPU only.
Status forward_in_fp32(const Runner& runner) {
  fa_test::Problem p;
  p.dtype = flashattn::DType::kF32;
  return forward_of(p, runner);
}

Status backward_of(const fa_test::Problem& p, const Runner& runner) {
  const fa_test::Inputs inputs = fa_test::make_inputs(p);
  fa_test::Outputs outputs = fa_test::make_outputs(p);
  return runner.backward(fa_test::backward_args(p, inputs, &outputs));
}

Status backward_in_fp32(const Runner& runner) {
  fa_test::Problem p;
  p.dtype = flashattn::DType::kF32;
  return backward_of(p, runner);
}

Status kvcache_of(const fa_test::KVCacheProblem& p, const Runner& runner) {
  const fa_test::KVCacheInputs inputs = fa_test::make_kvcache_inputs(p);
  fa_test::KVCacheOutputs outputs = fa_test::make_kvcache_outputs(p, inputs);
  return runner.forward_kvcache(fa_test::kvcache_args(p, inputs, &outputs));
}

Status kvcache_in_fp32(const Runner& runner) {
  fa_test::KVCacheProblem p;
  p.dtype = flashattn::DType::kF32;
  p.seqlen_new = 1;
  return kvcache_of(p, runner);
}

// e4m3 q, k, v of a head dim without an FP8 kernel (64, 128, 256 have one on Hopper; other
// GPUs refuse every e4m3 forward: test_cuda_fp8_forward.cpp). (An e4m3 KV cache runs:
// test_cuda_kvcache_fp8.cpp.)
Status forward_in_e4m3_hdim32(const Runner& runner) {
  fa_test::Problem p;
  p.dtype = flashattn::DType::kF8E4M3;
  p.head_dim = 32;
  return forward_of(p, runner);
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

using CudaRefuses = CudaTestWithParam<Refusal>;

TEST_P(CudaRefuses, ThroughSupportedAndTheEntryPoint) {
  const Refusal& refusal = GetParam();
  for (const Runner& runner : {cuda_support_runner(), cuda_runner()}) {
    const Status status = refusal.call(runner);
    EXPECT_EQ(status.code(), flashattn::StatusCode::kUnsupported)
        << runner.name << ": " << flashattn::to_string(status.code()) << " " << status.message();
    EXPECT_NE(lowercase(status.message()).find(refusal.message_word), std::string::npos)
        << runner.name << ": the message does not name " << refusal.feature << ": "
        << status.message();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cuda, CudaRefuses,
    ::testing::Values(Refusal{"fp32", "fp32", forward_in_fp32},
                      Refusal{"backward_fp32", "fp32", backward_in_fp32},
                      Refusal{"kvcache_fp32", "fp32", kvcache_in_fp32},
                      Refusal{"e4m3_hdim32", "e4m3", forward_in_e4m3_hdim32}),
    [](const ::testing::TestParamInfo<Refusal>& param) { return std::string(param.param.feature); });

}  // namespace
}  // namespace fa_cuda_test
