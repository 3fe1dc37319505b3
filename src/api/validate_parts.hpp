// Pieces shared by the three validators (validate_attention.cpp, validate_kvcache.cpp):
// the sizes read from q and k, the options, device placement and backend support.
#pragma once

#include <vector>

#include "api/checks.hpp"
#include "api/validate.hpp"

namespace flashattn::api {

// The sizes of one call, read from q, k and v and checked against every other tensor.
struct Sizes {
  bool varlen = false;
  int64_t batch = 0;
  int64_t seqlen_q = 0;  // varlen: max_seqlen_q
  int64_t seqlen_k = 0;  // varlen: max_seqlen_k; KV cache: the cache capacity
  int64_t rows_q = 0;    // dense: seqlen_q; varlen: total_q
  int64_t rows_k = 0;    // dense: seqlen_k; varlen: total_k
  int64_t nheads = 0;
  int64_t nheads_k = 0;
  int64_t head_dim = 0;
  int64_t head_dim_v = 0;

  Shape q() const;    // [batch, seqlen_q, nheads, head_dim] or [total_q, nheads, head_dim]
  Shape k() const;    // [batch, seqlen_k, nheads_k, head_dim] or [total_k, ...]
  Shape v() const;    // as k, with head_dim_v
  Shape out() const;  // as q, with head_dim_v
  Shape lse() const;  // [batch, nheads, seqlen_q] or [nheads, total_q]
};

struct NamedTensor {
  const char* name;
  const Tensor* tensor;
};

// q's head count and k's: nheads >= 1 and nheads_k dividing it.
Status check_heads(int64_t nheads, int64_t nheads_k, const char* k_name);
// Dense batch * seqlen_q rows must fit the int32 total_q of the Params.
Status check_total_q(const Sizes& sizes);
// d (q and k) and d_v (v and out) within 1..256.
Status check_head_dims(int64_t head_dim, int64_t head_dim_v, const char* v_name);

// Scale, window/causal, softcap, dropout and ALiBi slopes against docs/contract.md.
Status check_options(const AttentionOptions& options, const Sizes& sizes);
// The resolved options: default scale, scale * log2(e), causal folded into the window,
// the dropout threshold and rescale, the ALiBi pointer and batch stride.
void fill_options(const AttentionOptions& options, const Sizes& sizes,
                  core::AttentionParams* params);

// Varlen layout (validate_varlen.cpp). The structure: cu_seqlens_q/k int32 [batch + 1],
// seqused_k int32 [batch], max_seqlen_* >= 0; `batch` is read from cu_seqlens_q. A dense
// call must leave the varlen tensors empty.
Status check_varlen_structure(const VarlenLayout& varlen, int64_t* batch);
Status check_dense_has_no_varlen(const VarlenLayout& varlen);
// The contents, read only from host memory (after check_placement).
Status check_varlen_contents(const VarlenLayout& varlen, const Sizes& sizes);

// Every present tensor declared on the target's device, and, when the target asks, the
// CUDA runtime agreeing that each pointer lives where it is declared.
Status check_placement(const std::vector<NamedTensor>& tensors, const Target& target);
// A raw pointer the call reads (no Tensor to declare its device): where the runtime says it
// lives must be the target's device, when the CUDA runtime is usable to say so.
Status check_pointer_placement(const char* name, const void* ptr, const Target& target);

// FP8: the output of an e4m3 attention is bf16 or fp16 (the caller's out says which).
Status expect_fp8_output_dtype(const Tensor& out, const char* name);
// descale.q / .k / .v: absent, or fp32 [batch, nheads_k] or [1]; given only for e4m3
// operands (q for descale.q, k and v, or the caches, for descale.k and descale.v).
Status check_descales(const Descales& descale, bool q_e4m3, bool kv_e4m3, const Sizes& sizes);
void fill_descales(const Descales& descale, bool q_e4m3, bool kv_e4m3,
                   core::AttentionParams* params);

// Valid calls the target cannot run: fp32 on CUDA, d_v != d (not implemented yet). (e4m3
// calls reach the CUDA plans, which refuse what they have no kernel for.)
Status check_backend_support(DType dtype, const Sizes& sizes, const Target& target,
                             const char* v_name);

// Sizes, dtype and operands shared by every Params (q, out, lse and the head counts); the
// Params' dtype is out's (q's unless q is e4m3).
void fill_common(const Tensor& q, const Tensor& out, const Tensor& lse, const Sizes& sizes,
                 core::AttentionParams* params);

}  // namespace flashattn::api
