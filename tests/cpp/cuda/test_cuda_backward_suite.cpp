// The CUDA backward through the public API (cuda_runner) against the reference, with the
// shared problems and tolerance check the CPU backend runs (fa_test::check_backward: the
// runner's own forward, then its backward; out, lse, dq, dk, dv under FA2's rule), in fp16
// and bf16: every head dim with a backward kernel and padded ones, odd and unequal sequence
// lengths, causal and windows (rows without keys included: zero gradients), softcap, ALiBi,
// GQA/MQA, varlen with empty sequences and seqused_k, strided views; both dQ accumulation
// modes; and the deterministic mode, bitwise identical run to run. The CPU reference backward is slow: problems stay small.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_support.hpp"
#include "support/reference_problem.hpp"

namespace fa_cuda_test {
namespace {

using fa_test::Problem;
using flashattn::DType;

// Runs the CUDA forward and backward of `p` and expects rows [row_begin, row_end) of the
// gradient `which` (a [rows, heads, d] or [b, rows, heads, d] tensor, flattened over the
// leading dims) to be exactly zero: rows without a visible key (docs/contract.md), not close.
void expect_zero_rows(const Problem& p, const char* which, int row_begin, int row_end) {
  const fa_test::Inputs inputs = fa_test::make_inputs(p);
  fa_test::Outputs outputs = fa_test::make_outputs(p);
  const fa_test::Runner runner = cuda_runner();
  ASSERT_TRUE(runner.forward(fa_test::forward_args(p, inputs, &outputs)).ok());
  const flashattn::Status status = runner.backward(fa_test::backward_args(p, inputs, &outputs));
  ASSERT_TRUE(status.ok()) << status.message();
  const fa_test::HostTensor& grad = std::string(which) == "dq" ? outputs.dq
                                    : std::string(which) == "dk" ? outputs.dk
                                                                 : outputs.dv;
  const int r = grad.rank();
  const int64_t row_elements = grad.size(r - 1) * grad.size(r - 2);
  int nonzero = 0;
  for (int64_t i = row_begin * row_elements; i < row_end * row_elements; ++i) {
    if (grad.get(i) != 0.f) ++nonzero;
  }
  EXPECT_EQ(nonzero, 0) << p.describe() << ": " << which << " rows " << row_begin << ".."
                        << row_end;
}

class CudaBackward : public CudaDtypeSuite {
 protected:
  CudaBackward() : CudaDtypeSuite(20000) {}

  // Both accumulation modes of dQ must pass the same check.
  static void expect_passes_on_cuda(const Problem& p) {
    expect_passes(fa_test::check_backward(p, cuda_runner()));
    expect_passes(fa_test::check_backward(p, deterministic_runner()));
  }
};

TEST_P(CudaBackward, HeadDims) {
  for (int d : {32, 64, 96, 128, 256}) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 2, 1, 77, 130, d});
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

// d without a kernel: the API pads into the workspace and copies dq, dk, dv back.
TEST_P(CudaBackward, HeadDimsServedByPadding) {
  for (int d : {1, 8, 16, 24, 40, 72, 80, 100, 127, 160, 192, 255}) {
    Problem p = problem({2, 2, 1, 45, 90, d});
    p.causal = d % 2 == 0;
    expect_passes_on_cuda(p);
  }
  Problem packed = varlen(4, 2, 40, {30, 0, 77}, {50, 9, 60});
  packed.seqused_k = {50, 0, 41};
  packed.causal = true;
  expect_passes_on_cuda(packed);
}

// Lengths that are not multiples of any tile, 1, and sq != sk both ways (causal sq > sk
// leaves the first sq - sk rows without keys: their dq is 0 and they add nothing to dk, dv).
TEST_P(CudaBackward, OddAndUnequalSeqlens) {
  const std::pair<int, int> lengths[] = {{1, 1},     {1, 17},   {17, 1},   {17, 17},
                                         {127, 127}, {1, 127},  {127, 1},  {113, 203},
                                         {203, 113}, {128, 64}, {64, 128}, {129, 65}};
  for (auto [sq, sk] : lengths) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 2, 1, sq, sk, sq % 2 == 0 ? 128 : 64});
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaBackward, LongerSequences) {
  Problem p = problem({1, 2, 1, 400, 500, 64});
  p.causal = true;
  expect_passes_on_cuda(p);
  Problem q = problem({1, 1, 1, 300, 300, 128});
  expect_passes_on_cuda(q);
}

TEST_P(CudaBackward, RowsWithoutKeysGetZeroGradients) {
  Problem causal = problem({2, 2, 2, 150, 40, 64});
  causal.causal = true;
  Problem shut_window = problem({1, 2, 2, 100, 10, 64});  // window (0, 0) with sq > sk
  shut_window.window_left = 0;
  shut_window.window_right = 0;
  Problem keyless_sequences = varlen(2, 1, 64, {20, 33, 7}, {0, 40, 9});
  keyless_sequences.seqused_k = {0, 40, 0};
  for (const Problem& p : {causal, shut_window, keyless_sequences}) expect_passes_on_cuda(p);
  expect_zero_rows(causal, "dq", 0, 110);             // batch 0: its first 150 - 40 rows
  expect_zero_rows(shut_window, "dq", 0, 90);
  expect_zero_rows(keyless_sequences, "dq", 0, 20);   // sequence 0 has no keys
  expect_zero_rows(keyless_sequences, "dk", 40, 49);  // sequence 2: seqused_k = 0
  expect_zero_rows(keyless_sequences, "dv", 40, 49);
}

TEST_P(CudaBackward, SlidingWindows) {
  const std::pair<int, int> windows[] = {{16, -1}, {0, -1}, {-1, 5}, {0, 0}, {32, 32}, {100, 7}};
  for (auto [left, right] : windows) {
    for (auto [sq, sk] : {std::pair{150, 150}, std::pair{90, 170}, std::pair{170, 90}}) {
      Problem p = problem({1, 2, 2, sq, sk, 64});
      p.window_left = left;
      p.window_right = right;
      expect_passes_on_cuda(p);
    }
  }
  Problem causal_with_left = problem({1, 2, 1, 260, 260, 96});
  causal_with_left.causal = true;
  causal_with_left.window_left = 40;
  expect_passes_on_cuda(causal_with_left);
}

TEST_P(CudaBackward, Alibi) {
  for (bool per_batch : {false, true}) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 4, 2, 120, 170, 64});
      p.alibi = true;
      p.alibi_per_batch = per_batch;
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaBackward, Softcap) {
  for (int d : {64, 128}) {
    Problem p = problem({2, 2, 1, 143, 143, d});
    p.causal = d == 64;
    p.softcap = 30.f;
    p.input_scale = 3.f;
    expect_passes_on_cuda(p);
  }
  Problem wide = problem({1, 2, 1, 120, 100, 256});
  wide.softcap = 30.f;
  wide.causal = true;
  wide.input_scale = 3.f;
  expect_passes_on_cuda(wide);
  Problem tight = problem({1, 2, 2, 100, 100, 64});
  tight.softcap = 5.f;  // logits far beyond the cap: tanh' close to 0
  tight.softmax_scale = 0.5f;
  tight.input_scale = 3.f;
  expect_passes_on_cuda(tight);
  Problem with_alibi = problem({2, 2, 2, 170, 120, 128});
  with_alibi.softcap = 20.f;
  with_alibi.alibi = true;
  with_alibi.alibi_per_batch = true;
  with_alibi.causal = true;
  expect_passes_on_cuda(with_alibi);
}

TEST_P(CudaBackward, ScaleAndExtremeLogits) {
  Problem extreme = problem({1, 2, 2, 200, 200, 64});
  extreme.input_scale = 6.f;
  extreme.softmax_scale = 0.7f;
  expect_passes_on_cuda(extreme);
  Problem uniform = problem({2, 2, 1, 133, 211, 128});
  uniform.distribution = fa_test::Distribution::kUniform;
  uniform.causal = true;
  expect_passes_on_cuda(uniform);
}

// dk/dv sum the query heads of each KV head.
// softmax_scale = 0: uniform weights over the visible keys; dq and dk are 0.
TEST_P(CudaBackward, ZeroScale) {
  for (int d : {64, 128}) {
    for (float softcap : {0.f, 20.f}) {
      Problem p = problem({1, 2, 1, 150, 170, d});
      p.causal = true;
      p.zero_scale = true;
      p.softcap = softcap;
      expect_passes_on_cuda(p);
    }
  }
}

TEST_P(CudaBackward, GqaAndMqa) {
  for (int nheads_k : {1, 2, 8}) {
    for (bool causal : {false, true}) {
      Problem p = problem({2, 8, nheads_k, 97, 131, 64});
      p.causal = causal;
      expect_passes_on_cuda(p);
    }
  }
  expect_passes_on_cuda(problem({1, 6, 3, 64, 64, 128}));
  expect_passes_on_cuda(problem({1, 4, 1, 70, 90, 256}));  // d = 256: the smallest tile
}

// GQA on grids smaller than the GPU: the sm90 kernel splits a KV head's query heads among
// blocks (bwd_sm90_kv_splits) and adds their fp32 dK/dV partials; uneven splits (7 query
// heads), MQA, every sm90 head dim, masks, varlen with seqused_k, strided outputs, and a
// grid large enough to take no split.
TEST_P(CudaBackward, GqaSplitAmongBlocks) {
  const struct {
    Shape shape;
    bool causal;
  } cases[] = {{{1, 14, 2, 300, 300, 64}, true},  {{1, 14, 2, 200, 333, 64}, false},
               {{2, 8, 1, 150, 257, 128}, true},  {{1, 6, 2, 90, 400, 128}, false},
               {{1, 16, 2, 100, 200, 256}, true}, {{16, 16, 8, 64, 300, 64}, true}};
  for (const auto& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    expect_passes_on_cuda(p);
  }
  Problem windowed = problem({1, 12, 2, 180, 260, 128});
  windowed.window_left = 40;
  windowed.window_right = 10;
  windowed.alibi = true;
  windowed.softcap = 12.f;
  expect_passes_on_cuda(windowed);
  Problem strided = problem({1, 8, 2, 100, 140, 64});
  strided.strided = true;
  expect_passes_on_cuda(strided);
  Problem packed = varlen(14, 2, 64, {30, 0, 257}, {41, 9, 300});
  packed.seqused_k = {41, 0, 280};
  packed.causal = true;
  expect_passes_on_cuda(packed);
}

TEST_P(CudaBackward, VarlenWithEmptySequencesAndSequsedK) {
  for (bool causal : {false, true}) {
    Problem p = varlen(4, 2, 64, {1, 17, 0, 127, 200, 5}, {5, 40, 17, 127, 150, 0});
    p.causal = causal;
    expect_passes_on_cuda(p);
    p.seqused_k = {3, 40, 0, 100, 101, 0};
    expect_passes_on_cuda(p);
    p.seqused_k.clear();
    p.causal = false;
    p.window_left = 20;
    p.window_right = causal ? 0 : 7;
    expect_passes_on_cuda(p);
  }
  Problem features = varlen(4, 1, 96, {50, 130, 7}, {60, 140, 30});
  features.seqused_k = {60, 100, 0};
  features.alibi = true;
  features.alibi_per_batch = true;
  features.softcap = 10.f;
  features.window_left = 20;
  features.window_right = 0;
  expect_passes_on_cuda(features);
}

// q, k, v as slices of a packed qkv buffer and padded outputs and gradients.
TEST_P(CudaBackward, StridedViews) {
  for (bool causal : {false, true}) {
    Problem dense = problem({2, 4, 2, 150, 120, 64});
    dense.strided = true;
    dense.causal = causal;
    expect_passes_on_cuda(dense);
  }
  Problem packed = varlen(2, 2, 128, {40, 90}, {70, 90});
  packed.strided = true;
  packed.causal = true;
  expect_passes_on_cuda(packed);
}

// Deterministic without a mask, at most 8 key blocks and at least as many query blocks
// (d = 64: 128 x 128 tiles, d = 128: 64 x 128), the sm90 kernel with the dQ writer takes its
// tiles from tickets and adds dQ in the rotated order (bwd_block_order.cuh; the plan's test
// pins these shapes to it): the gradients must be as right as in the fixed order.
TEST_P(CudaBackward, DeterministicRotatedOrder) {
  const Shape shapes[] = {{1, 2, 1, 600, 520, 64}, {2, 4, 2, 120, 250, 128},
                          {1, 4, 2, 256, 250, 64}, {1, 2, 1, 600, 1000, 128}};
  for (const Shape& shape : shapes) {
    expect_passes(fa_test::check_backward(problem(shape), deterministic_runner()));
  }
}

struct MaskedShape {
  Shape shape;
  bool causal;
};

// Deterministic, short sequences without a mask that do not rotate (d = 256; d = 128 with too
// few query blocks): on Hopper the key blocks add into two dQ accumulator slices by parity
// (bwd_deterministic_plan.hpp; the plan's test pins these shapes to two slices), summed by the
// conversion; odd and even key block counts, GQA; causal takes one slice.
TEST_P(CudaBackward, DeterministicSlicedAccumulator) {
  const MaskedShape cases[] = {{{2, 4, 2, 700, 900, 256}, false},
                               {{1, 2, 1, 300, 200, 256}, false},
                               {{1, 2, 1, 100, 900, 128}, false},
                               {{2, 4, 1, 500, 500, 256}, true}};
  for (const MaskedShape& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    expect_passes(fa_test::check_backward(p, deterministic_runner()));
  }
}

// Deterministic under a causal mask with at least 32 key blocks: the key blocks take turns in
// groups, the lower groups first (bwd_block_order.cuh; the plan's test pins these shapes to two
// groups): 33 key blocks of 64 (d = 256, GQA), 32 of 128 (d = 128), 33 of 128 (d = 64).
TEST_P(CudaBackward, DeterministicTurnGroups) {
  const Shape shapes[] = {{1, 2, 1, 300, 2100, 256}, {1, 1, 1, 300, 4096, 128},
                          {1, 2, 2, 600, 4200, 64}};
  for (const Shape& shape : shapes) {
    Problem p = problem(shape);
    p.causal = true;
    expect_passes(fa_test::check_backward(p, deterministic_runner()));
  }
}

// deterministic = true: 20 runs give bitwise identical dq, dk, dv (many key blocks add into
// each query block's dQ, so atomics in a racing order would differ in the last bits). Without
// a mask the 500 x 1000 (d = 128) and 1000 x 1000 (d = 64) problems take the rotated order on
// Hopper (8 key blocks), the 700 x 900 d = 256 one two accumulator slices, the causal ones the
// fixed order and two turn groups.
TEST_P(CudaBackward, DeterministicIsBitwiseReproducible) {
  const MaskedShape cases[] = {{{2, 4, 2, 700, 900, 64}, true},
                               {{1, 2, 1, 300, 2100, 256}, true},
                               {{2, 4, 2, 700, 900, 256}, false},
                               {{2, 4, 2, 500, 1000, 128}, false},
                               {{2, 4, 2, 1000, 1000, 64}, false}};
  for (const MaskedShape& c : cases) {
    Problem p = problem(c.shape);
    p.causal = c.causal;
    const fa_test::Inputs inputs = fa_test::make_inputs(p);
    fa_test::Outputs outputs = fa_test::make_outputs(p);
    const fa_test::Runner runner = deterministic_runner();
    ASSERT_TRUE(runner.forward(fa_test::forward_args(p, inputs, &outputs)).ok());
    std::vector<std::vector<uint8_t>> first;
    for (int run = 0; run < 20; ++run) {
      fa_test::Outputs grads = outputs;
      grads.dq.poison();
      grads.dk.poison();
      grads.dv.poison();
      const flashattn::Status status = runner.backward(fa_test::backward_args(p, inputs, &grads));
      ASSERT_TRUE(status.ok()) << status.message();
      std::vector<std::vector<uint8_t>> bytes = {grads.dq.raw_bytes(), grads.dk.raw_bytes(),
                                                 grads.dv.raw_bytes()};
      ASSERT_FALSE(fa_test::has_nan(grads.dq) || fa_test::has_nan(grads.dk) ||
                   fa_test::has_nan(grads.dv));
      if (run == 0) {
        first = std::move(bytes);
      } else {
        EXPECT_TRUE(bytes == first) << p.describe() << ": run " << run << " differs";
      }
    }
  }
}

// The default problem (GQA, d = 64): the entry point runs it, through supported() too.
TEST_P(CudaBackward, DefaultProblemRunsAndIsSupported) {
  Problem p;
  p.dtype = GetParam();
  const fa_test::Inputs inputs = fa_test::make_inputs(p);
  fa_test::Outputs outputs = fa_test::make_outputs(p);
  const flashattn::Status status =
      cuda_support_runner().backward(fa_test::backward_args(p, inputs, &outputs));
  EXPECT_TRUE(status.ok()) << status.message();
  expect_passes_on_cuda(p);
}

INSTANTIATE_TEST_SUITE_P(Dtype, CudaBackward, ::testing::Values(DType::kF16, DType::kBF16),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(flashattn::to_string(param.param));
                         });

}  // namespace
}  // namespace fa_cuda_test
