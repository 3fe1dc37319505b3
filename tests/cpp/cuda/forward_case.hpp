// One CUDA forward problem for the GPU tests: random inputs in a chosen memory layout, the
// kernel run through cuda::check_forward / cuda::forward with hand-filled AttentionParams,
// and a comparison against a float64 reference of SPEC.md under FA2's tolerance rule
// (max|out - ref| <= 2 max|lowp - ref| + eps, lowp = naive attention with the scores, P and
// the output rounded to the input precision). lse is checked the same way; rows with no
// visible key must give out = 0 and lse = -inf exactly; the output's stride gaps must keep
// their poison.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace fa_cuda_test {

enum class Layout {
  kContiguous,  // [b, s, h, d]
  kHeadMajor,   // [b, h, s, d] viewed as [b, s, h, d]
  kRowPadded,   // [b, s, h, d] rows `row_pad` elements apart beyond h * d (a slice)
  kPackedQKV,   // q, k, v as slices of one [b, s, h + 2 hk, d] buffer (dense, sq == sk)
};

struct FwdCase {
  flashattn::core::ElementType dtype = flashattn::core::ElementType::kBF16;
  int batch = 1;
  int nheads = 1;
  int nheads_k = 1;
  int seqlen_q = 1;  // dense; varlen uses the lengths below
  int seqlen_k = 1;
  int head_dim = 64;
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
  float scale = 0.f;  // 0: 1/sqrt(d)
  int alibi = 0;      // 0: none, 1: slopes [h], 2: slopes [b, h]
  std::vector<int> varlen_q;   // non-empty: varlen with these sequence lengths
  std::vector<int> varlen_k;
  std::vector<int> seqused_k;  // optional, varlen only
  Layout layout = Layout::kContiguous;
  int row_pad = 0;
  bool want_lse = true;
  float input_scale = 1.f;  // > 1 for extreme logits
  float dropout_p = 0.f;
};

struct FwdOutcome {
  flashattn::Status status;  // of check_forward, then forward
  double error = 0, baseline = 0;
  double lse_error = 0, lse_baseline = 0;
  int empty_row_failures = 0;  // rows with no visible key not giving exactly 0 / -inf
  int64_t gap_writes = 0;      // output stride gaps that lost their poison
  int64_t nan_outputs = 0;     // NaN where the reference is finite
  bool used_workspace = false;
  std::string describe() const;
  bool passed() const;
};

std::string describe(const FwdCase& c);

// Runs the case on device 0 with inputs drawn from `seed`.
FwdOutcome run_forward_case(const FwdCase& c, uint32_t seed);

}  // namespace fa_cuda_test
