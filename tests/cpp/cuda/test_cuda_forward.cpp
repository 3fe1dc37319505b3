// GPU tests of the CUDA forward against the float64 reference (forward_case.hpp). Every
// test skips when no GPU is visible. CudaForwardSanitize.* are the small problems that
// scripts/gpu-check also runs under compute-sanitizer.
#include <gtest/gtest.h>

#include <vector>

#include "forward_case.hpp"

namespace fa_cuda_test {
namespace {

using flashattn::StatusCode;
using flashattn::core::ElementType;

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    if (!flashattn::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

uint32_t next_seed() {
  static uint32_t seed = 20240611u;
  return seed++;
}

void expect_pass(const FwdCase& c) {
  const FwdOutcome r = run_forward_case(c, next_seed());
  EXPECT_TRUE(r.passed()) << describe(c) << "\n  " << r.describe();
}

FwdCase dense(ElementType t, int b, int h, int hk, int sq, int sk, int d, bool causal) {
  FwdCase c;
  c.dtype = t;
  c.batch = b;
  c.nheads = h;
  c.nheads_k = hk;
  c.seqlen_q = sq;
  c.seqlen_k = sk;
  c.head_dim = d;
  c.causal = causal;
  return c;
}

const ElementType kTypes[] = {ElementType::kBF16, ElementType::kF16};

TEST(CudaForward, CompiledHeadDims) {
  REQUIRE_GPU();
  for (ElementType t : kTypes) {
    for (int d : {32, 64, 96, 128, 192, 256}) {
      for (bool causal : {false, true}) expect_pass(dense(t, 2, 3, 3, 197, 197, d, causal));
    }
  }
}

TEST(CudaForward, PaddedHeadDims) {
  REQUIRE_GPU();
  for (int d : {1, 7, 8, 40, 72, 100, 136, 160, 200, 255}) {
    for (bool causal : {false, true}) {
      expect_pass(dense(ElementType::kBF16, 2, 2, 1, 77, 90, d, causal));
    }
  }
  expect_pass(dense(ElementType::kF16, 1, 2, 2, 33, 33, 24, true));
}

TEST(CudaForward, OddSequenceLengths) {
  REQUIRE_GPU();
  const int lengths[][2] = {{1, 1},   {1, 17},   {17, 1},   {17, 17},   {127, 127}, {1, 300},
                            {300, 1}, {113, 203}, {203, 113}, {128, 64}, {64, 128},  {129, 65}};
  for (ElementType t : kTypes) {
    for (const auto& l : lengths) {
      for (bool causal : {false, true}) {
        expect_pass(dense(t, 2, 2, 2, l[0], l[1], 64, causal));
        expect_pass(dense(t, 1, 2, 1, l[0], l[1], 128, causal));
      }
    }
  }
}

TEST(CudaForward, LongSequence) {
  REQUIRE_GPU();
  expect_pass(dense(ElementType::kBF16, 1, 2, 1, 1000, 1000, 128, true));
  expect_pass(dense(ElementType::kF16, 1, 1, 1, 1000, 1000, 64, false));
  expect_pass(dense(ElementType::kBF16, 1, 1, 1, 1000, 777, 256, true));
}

TEST(CudaForward, SlidingWindow) {
  REQUIRE_GPU();
  const int windows[][2] = {{0, 0}, {16, 0}, {-1, 5}, {32, 32}, {3, -1}, {100, 7}, {0, -1}};
  for (const auto& w : windows) {
    for (int d : {64, 128}) {
      for (auto lens : {std::vector<int>{150, 150}, std::vector<int>{90, 170}, std::vector<int>{170, 90}}) {
        FwdCase c = dense(ElementType::kBF16, 2, 2, 2, lens[0], lens[1], d, false);
        c.window_left = w[0];
        c.window_right = w[1];
        expect_pass(c);
      }
    }
  }
  FwdCase c = dense(ElementType::kF16, 1, 2, 1, 260, 260, 96, true);
  c.window_left = 40;
  expect_pass(c);
}

TEST(CudaForward, EmptyRows) {
  REQUIRE_GPU();
  // Causal with more queries than keys: the first sq - sk rows see no key.
  expect_pass(dense(ElementType::kBF16, 2, 2, 2, 150, 40, 64, true));
  expect_pass(dense(ElementType::kF16, 1, 1, 1, 9, 1, 128, true));
  // A window that shuts every row out of the keys.
  FwdCase c = dense(ElementType::kBF16, 1, 2, 2, 64, 64, 64, false);
  c.window_left = 0;
  c.window_right = 0;
  c.seqlen_q = 100;
  c.seqlen_k = 10;
  expect_pass(c);
}

TEST(CudaForward, Softcap) {
  REQUIRE_GPU();
  for (ElementType t : kTypes) {
    for (int d : {64, 128, 256}) {
      FwdCase c = dense(t, 2, 2, 1, 143, 143, d, d != 128);
      c.softcap = 30.f;
      c.input_scale = 3.f;
      expect_pass(c);
    }
  }
  FwdCase c = dense(ElementType::kBF16, 1, 2, 2, 100, 100, 64, false);
  c.softcap = 5.f;
  c.scale = 0.5f;
  expect_pass(c);
}

TEST(CudaForward, Alibi) {
  REQUIRE_GPU();
  for (int alibi : {1, 2}) {
    for (bool causal : {false, true}) {
      FwdCase c = dense(ElementType::kBF16, 2, 4, 2, 120, 170, 64, causal);
      c.alibi = alibi;
      expect_pass(c);
    }
  }
  FwdCase c = dense(ElementType::kF16, 2, 2, 2, 170, 120, 128, true);
  c.alibi = 2;
  c.softcap = 20.f;
  expect_pass(c);
}

TEST(CudaForward, GroupedQueryHeads) {
  REQUIRE_GPU();
  for (int hk : {1, 2, 4}) {
    for (bool causal : {false, true}) expect_pass(dense(ElementType::kBF16, 2, 8, hk, 97, 131, 128, causal));
  }
  expect_pass(dense(ElementType::kF16, 1, 6, 3, 64, 64, 64, true));
}

TEST(CudaForward, Varlen) {
  REQUIRE_GPU();
  for (ElementType t : kTypes) {
    for (bool causal : {false, true}) {
      FwdCase c = dense(t, 0, 4, 2, 0, 0, 64, causal);
      c.varlen_q = {1, 17, 128, 300, 5};
      c.varlen_k = {1, 40, 128, 250, 0};
      expect_pass(c);
      c.head_dim = 128;
      c.varlen_q = {200, 3, 0, 64};
      c.varlen_k = {180, 77, 9, 64};
      expect_pass(c);
    }
  }
  FwdCase c = dense(ElementType::kBF16, 0, 2, 1, 0, 0, 96, true);
  c.varlen_q = {50, 130, 7};
  c.varlen_k = {60, 140, 30};
  c.seqused_k = {60, 100, 0};
  expect_pass(c);
  c.head_dim = 80;  // padded path with varlen
  c.window_left = 20;
  expect_pass(c);
}

TEST(CudaForward, StridedViews) {
  REQUIRE_GPU();
  for (bool causal : {false, true}) {
    FwdCase c = dense(ElementType::kBF16, 2, 4, 2, 150, 150, 64, causal);
    c.layout = Layout::kPackedQKV;
    expect_pass(c);
    c.layout = Layout::kHeadMajor;
    expect_pass(c);
    c.layout = Layout::kRowPadded;
    c.row_pad = 24;
    expect_pass(c);
    c.row_pad = 3;  // misaligned rows: served through the padded workspace
    c.head_dim = 128;
    expect_pass(c);
  }
  FwdCase c = dense(ElementType::kF16, 0, 2, 2, 0, 0, 128, true);
  c.varlen_q = {40, 90};
  c.varlen_k = {70, 90};
  c.layout = Layout::kRowPadded;
  c.row_pad = 16;
  expect_pass(c);
}

TEST(CudaForward, ExtremeLogitsAndNoLse) {
  REQUIRE_GPU();
  for (ElementType t : kTypes) {
    FwdCase c = dense(t, 1, 2, 2, 200, 200, 64, false);
    c.input_scale = 6.f;
    expect_pass(c);
    c.causal = true;
    c.want_lse = false;
    c.input_scale = 1.f;
    expect_pass(c);
  }
}

TEST(CudaForward, Rejections) {
  REQUIRE_GPU();
  FwdCase c = dense(ElementType::kBF16, 1, 2, 2, 64, 64, 64, false);
  c.dropout_p = 0.1f;
  EXPECT_EQ(run_forward_case(c, 1).status.code(), StatusCode::kUnsupported);
  c = dense(ElementType::kF32, 1, 2, 2, 64, 64, 64, false);
  EXPECT_EQ(run_forward_case(c, 1).status.code(), StatusCode::kUnsupported);
}

TEST(CudaForwardSanitize, SmallProblems) {
  REQUIRE_GPU();
  expect_pass(dense(ElementType::kBF16, 1, 2, 1, 70, 70, 64, true));
  expect_pass(dense(ElementType::kF16, 1, 1, 1, 33, 130, 128, false));
  expect_pass(dense(ElementType::kBF16, 1, 1, 1, 130, 33, 256, true));
  expect_pass(dense(ElementType::kBF16, 1, 1, 1, 20, 20, 40, false));
  FwdCase c = dense(ElementType::kBF16, 0, 2, 2, 0, 0, 96, true);
  c.varlen_q = {5, 70};
  c.varlen_k = {9, 80};
  c.window_left = 10;
  expect_pass(c);
}

}  // namespace
}  // namespace fa_cuda_test
