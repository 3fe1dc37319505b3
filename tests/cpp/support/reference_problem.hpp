// One forward/backward attention problem with fresh random inputs, and the check the
// backends' test suites share: run the backend, the exact reference and the
// low-precision reference on the same inputs, then apply the tolerance rule to out, lse
// and (backward) dq, dk, dv. Keep the suites parametrized by Runner, so the CPU and CUDA
// backends run exactly the same problems.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "support/backend_runner.hpp"
#include "support/host_tensor.hpp"

namespace fa_test {

enum class Distribution { kNormal, kUniform };

struct Problem {
  int batch = 2;
  int nheads = 4;
  int nheads_k = 2;
  int seqlen_q = 33;  // dense only; varlen lengths come from seqlens_q
  int seqlen_k = 47;
  int head_dim = 64;
  int head_dim_v = 0;  // 0: head_dim
  DType dtype = DType::kF16;
  // FP8 (dtype kF8E4M3): out's dtype, and random descales per (batch, KV head) or, with
  // one_descale, one factor per tensor ([1]); none: no descale tensors (factors of 1).
  DType out_dtype = DType::kBF16;
  enum class Descales { kNone, kPerHead, kOne } descales = Descales::kPerHead;

  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
  bool alibi = false;            // random slopes, [nheads] ...
  bool alibi_per_batch = false;  // ... or [batch, nheads]
  float dropout_p = 0.f;
  uint64_t dropout_seed = 0x5eed;
  uint64_t dropout_offset = 0;
  float softmax_scale = 0.f;  // 0: 1/sqrt(head_dim)
  bool zero_scale = false;    // softmax_scale exactly 0: uniform weights over the visible keys

  // Varlen when seqlens_q is not empty: one entry per sequence (batch is ignored).
  std::vector<int> seqlens_q;
  std::vector<int> seqlens_k;
  std::vector<int> seqused_k;  // optional, varlen only

  bool strided = false;  // q, k, v, out and gradients are views with padded head strides

  Distribution distribution = Distribution::kNormal;
  float input_scale = 1.f;  // stddev or half-width: large values give extreme logits
  uint32_t seed = 1;        // of the random inputs
  double eps_scale = 1.0;   // loosens (or tightens) the eps of the tolerance rule

  bool varlen() const { return !seqlens_q.empty(); }
  bool fp8() const { return dtype == DType::kF8E4M3; }
  DType out_type() const { return fp8() ? out_dtype : dtype; }
  int sequences() const;
  int dim_v() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  int total_q() const;  // rows of q: varlen sum, or batch * seqlen_q
  int total_k() const;
  int max_seqlen_q() const;
  int max_seqlen_k() const;
  // Sequence b: its first row in q-like and k-like tensors (varlen; 0 when dense, where
  // the batch index selects it), its queries, and the keys it attends (seqused_k applied).
  int q_row0(int b) const;
  int k_row0(int b) const;
  int seqlen_q_of(int b) const;
  int keys_of(int b) const;
  std::string describe() const;
};

struct Inputs {
  HostTensor q, k, v, dout;
  HostTensor q_descale, k_descale, v_descale;  // FP8 problems with descales only
  HostTensor alibi_slopes;                        // empty unless alibi
  HostTensor cu_seqlens_q, cu_seqlens_k, seqused_k;  // empty unless varlen
};
Inputs make_inputs(const Problem& problem);

struct Outputs {
  HostTensor out, lse, dq, dk, dv;
};
// Shaped (and strided) for the problem, poisoned with NaN.
Outputs make_outputs(const Problem& problem);

// Sequence b of a varlen problem as a dense batch of one over the keys it attends, and
// its inputs (dout and alibi slopes included) cut from the packed ones.
Problem dense_sequence(const Problem& varlen, int b);
Inputs dense_sequence_inputs(const Problem& varlen, const Inputs& packed, int b);

flashattn::AttentionOptions attention_options(const Problem& problem, const Inputs& inputs);
flashattn::VarlenLayout varlen_layout(const Problem& problem, const Inputs& inputs);
// out/lse of `outputs` are written by the forward and read by the backward.
flashattn::ForwardArgs forward_args(const Problem& problem, const Inputs& inputs,
                                    Outputs* outputs);
flashattn::BackwardArgs backward_args(const Problem& problem, const Inputs& inputs,
                                      Outputs* outputs);

// out and lse of `runner` against the reference.
CheckResult check_forward(const Problem& problem, const Runner& runner);
// The runner's forward, then its backward with its own out/lse; out, lse, dq, dk, dv
// against the reference doing the same.
CheckResult check_backward(const Problem& problem, const Runner& runner);

}  // namespace fa_test
