// Device placement and backend capability: host backends read host memory, the CUDA
// backend reads one GPU's memory and takes fp16/bf16 only. Tests that fabricate
// CUDA-declared views of host memory only make sense where the CUDA runtime cannot see
// through them, and skip elsewhere; the last test covers the other side.
#include <gtest/gtest.h>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::DeviceType;
using flashattn::ForwardArgs;
using flashattn::StatusCode;
using flashattn::Tensor;

// Every tensor of the call declared on cuda:`index`.
ForwardArgs declared_on_cuda(const ForwardArgs& args, int index = 0) {
  ForwardArgs moved = args;
  for (Tensor* t : {&moved.q, &moved.k, &moved.v, &moved.out, &moved.lse}) {
    *t = on_device(*t, DeviceType::kCUDA, index);
  }
  return moved;
}

// Why the fabricated-pointer tests skip where CUDA is usable (GTEST_SKIP must be written in
// the test body itself: it only leaves the function it is in).
const char* const kRuntimeSeesHostPointers =
    "the CUDA runtime would see these are host pointers declared as device memory";

TEST(ValidationDevice, HostBackendsRejectDeviceMemory) {
  ForwardCase f;
  f.args.q = on_device(f.args.q, DeviceType::kCUDA);
  EXPECT_TRUE(Rejected(flashattn::supported(f.args, Backend::kCpu), kInvalid, "q", "host memory"));
  ForwardCase g;
  HostTensor slopes(DType::kF32, {g.p.nheads});
  g.args.options.alibi_slopes = on_device(slopes.view(), DeviceType::kCUDA);
  EXPECT_TRUE(Rejected(flashattn::supported(g.args, Backend::kReference), kInvalid,
                       "options.alibi_slopes", "host memory"));
}

TEST(ValidationDevice, CudaBackendRejectsHostMemory) {
  ForwardCase f(Problem{DType::kF16});
  EXPECT_TRUE(Rejected(flashattn::supported(f.args, Backend::kCuda), kInvalid, "q", "CUDA memory"));
}

TEST(ValidationDevice, AutoWithHostTensorsRunsOnTheCpu) {
  ForwardCase f;
  EXPECT_TRUE(flashattn::supported(f.args, Backend::kAuto).ok());
  KVCacheCase c;
  EXPECT_TRUE(flashattn::supported(c.args, Backend::kAuto).ok());
}

TEST(ValidationDevice, TensorsOnDifferentGpus) {
  if (flashattn::cuda_available()) GTEST_SKIP() << kRuntimeSeesHostPointers;
  ForwardCase f(Problem{DType::kF16});
  ForwardArgs args = declared_on_cuda(f.args);
  args.k = on_device(args.k, DeviceType::kCUDA, 1);
  EXPECT_TRUE(Rejected(flashattn::supported(args, Backend::kCuda), kInvalid, "k", "cuda:0"));
}

TEST(ValidationDevice, Fp32IsUnsupportedOnCuda) {
  if (flashattn::cuda_available()) GTEST_SKIP() << kRuntimeSeesHostPointers;
  ForwardCase f(Problem{DType::kF32});
  const ForwardArgs args = declared_on_cuda(f.args);
  EXPECT_TRUE(
      Rejected(flashattn::supported(args, Backend::kCuda), StatusCode::kUnsupported, "q", "fp32"));
  EXPECT_TRUE(
      Rejected(flashattn::supported(args, Backend::kAuto), StatusCode::kUnsupported, "q", "fp32"));
}

TEST(ValidationDevice, CudaBackendUnavailable) {
  if (flashattn::cuda_available()) GTEST_SKIP() << kRuntimeSeesHostPointers;
  ForwardCase f(Problem{DType::kBF16});
  const ForwardArgs args = declared_on_cuda(f.args);
  EXPECT_TRUE(Rejected(flashattn::supported(args, Backend::kCuda), StatusCode::kUnsupported,
                       "backend cuda"));
  EXPECT_TRUE(Rejected(flashattn::forward(args, {Backend::kCuda}), StatusCode::kUnsupported,
                       "backend cuda"));
}

TEST(ValidationDevice, PointerNotWhereItIsDeclared) {
  if (!flashattn::cuda_available()) GTEST_SKIP() << "needs the CUDA runtime to locate pointers";
  ForwardCase f(Problem{DType::kF16});
  const ForwardArgs args = declared_on_cuda(f.args);
  EXPECT_TRUE(
      Rejected(flashattn::supported(args, Backend::kCuda), kInvalid, "q", "got a pointer on cpu"));
}

// Launch::devices_trusted: the caller vouches for the declared devices, and the call does not
// ask the runtime. An empty call (batch 0) declared on cuda:0 over host memory runs nothing,
// so only the placement check can reject it: it does without the flag and not with it.
TEST(ValidationDevice, TrustedDevicesAreNotAskedOfTheRuntime) {
  if (!flashattn::cuda_available()) GTEST_SKIP() << "needs the CUDA runtime to locate pointers";
  ForwardCase f(Problem{DType::kF16, /*batch=*/0});
  alignas(256) static char host[256];
  ForwardArgs args = declared_on_cuda(f.args);
  for (Tensor* t : {&args.q, &args.k, &args.v, &args.out, &args.lse}) t->data = host;
  const flashattn::Launch checked{Backend::kCuda};
  EXPECT_TRUE(Rejected(flashattn::forward(args, checked), kInvalid, "q", "got a pointer on cpu"));
  flashattn::Launch trusted{Backend::kCuda};
  trusted.devices_trusted = true;
  const flashattn::Status ran = flashattn::forward(args, trusted);
  EXPECT_TRUE(ran.ok()) << ran.message();
}

}  // namespace
}  // namespace api_test
