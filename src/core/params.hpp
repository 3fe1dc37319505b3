// The torch-free description of one attention call, filled on the host by the API layer
// after validation and read by every backend (passed to CUDA kernels as a
// `const __grid_constant__` parameter). Strides are in elements and 64-bit; sizes fit int.
#pragma once

#include <cstdint>

#include "core/platform.hpp"

namespace flashattn::core {

enum class ElementType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF8E4M3 = 3 };

// The largest head dim, d and d_v (docs/contract.md: 1..256; the API refuses larger).
inline constexpr int kMaxHeadDim = 256;

// A [batch, rows, heads, dim] operand (q, k, v, out and their gradients). For varlen
// inputs `batch_stride` is unused: sequence b starts at row cu_seqlens[b].
struct Operand {
  void* ptr = nullptr;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

// The fp32 factors an FP8 operand of (batch b, KV head g) is multiplied by when read:
// ptr[b * batch_stride + g * head_stride]; a null ptr means 1. Strides of 0 share one.
struct Descale {
  const float* ptr = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;

  FA_HOST_DEVICE float at(int b, int g) const {
    return ptr != nullptr ? ptr[b * batch_stride + g * head_stride] : 1.f;
  }
};

struct AttentionParams {
  // q, k, v, out (and the gradients, k_new, v_new, the rotary tables); with FP8 operands
  // the type of out, the others being e4m3 where the flags below say so.
  ElementType dtype = ElementType::kF16;
  bool q_e4m3 = false;   // q is e4m3, read as q * q_descale
  bool kv_e4m3 = false;  // k and v (the caches of forward_kvcache) are e4m3
  Descale q_descale, k_descale, v_descale;
  int batch = 0;
  int nheads = 0;
  int nheads_k = 0;
  int head_dim = 0;    // d, shared by q and k
  int head_dim_v = 0;  // d_v, shared by v and out
  int seqlen_q = 0;    // dense: the size; varlen: max_seqlen_q
  int seqlen_k = 0;    // dense: the size; varlen: max_seqlen_k; kv cache: the cache capacity
  int total_q = 0;     // rows of q (varlen: total_q; dense: batch * seqlen_q)
  int total_k = 0;     // varlen: rows of k and v (total_k); dense: unused

  Operand q, k, v, out;

  // fp32 log-sum-exp; null when not requested. Row i of (b, h) is at
  // lse[b * lse_batch_stride + h * lse_head_stride + i] (dense) or
  // lse[h * lse_head_stride + cu_seqlens_q[b] + i] (varlen).
  float* lse = nullptr;
  int64_t lse_batch_stride = 0;
  int64_t lse_head_stride = 0;

  // Varlen: null for dense inputs.
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  const int32_t* seqused_k = nullptr;

  // Scores: s = softcap * tanh(scale * q.k / softcap) - slope * |distance|.
  float scale = 1.f;
  float scale_log2 = 1.f;  // scale * log2(e), for exp2-based softmax
  float softcap = 0.f;     // 0: off
  const float* alibi_slopes = nullptr;  // [h] or [b, h]
  int64_t alibi_batch_stride = 0;       // 0 when the slopes are shared by the batch

  // Visibility window, causal folded in (right = 0); -1 means unbounded.
  int window_left = -1;
  int window_right = -1;

  // Dropout: keep an element iff its Philox draw is >= drop_threshold.
  float dropout_p = 0.f;
  uint32_t drop_threshold = 0;
  float dropout_rescale = 1.f;  // 1 / (1 - p)
  uint64_t seed = 0;
  uint64_t offset = 0;
  // When set, {seed, offset} are read from here when the call runs (host memory for the CPU
  // backends, the GPU's for CUDA): AttentionOptions::dropout_seed_offset. dropout_key() reads it.
  const uint64_t* seed_offset = nullptr;

  bool is_varlen() const { return cu_seqlens_q != nullptr; }
  bool is_causal() const { return window_left < 0 && window_right == 0; }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  // Later query rows see more keys (a causal mask, or a right window without a left one).
  bool keys_grow_with_rows() const { return window_right >= 0 && window_left < 0; }
  bool has_dropout() const { return dropout_p > 0.f; }
  ElementType q_type() const { return q_e4m3 ? ElementType::kF8E4M3 : dtype; }
  ElementType kv_type() const { return kv_e4m3 ? ElementType::kF8E4M3 : dtype; }
  bool has_fp8() const { return q_e4m3 || kv_e4m3; }
};

// The Philox key of a dropout call: from seed_offset when the caller gave its address, else
// the values given with the call. Host and device code read it the same way.
struct DropoutKey {
  uint64_t seed;
  uint64_t offset;
};
FA_HOST_DEVICE DropoutKey dropout_key(const AttentionParams& p) {
  if (p.seed_offset != nullptr) return {p.seed_offset[0], p.seed_offset[1]};
  return {p.seed, p.offset};
}

struct BackwardParams : AttentionParams {
  Operand dout, dq, dk, dv;
  bool deterministic = false;
  // Workspace carved by the backend from Launch::workspace.
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;
};

// forward_kvcache: `k` and `v` of the base describe the cache. For a paged cache
// batch_stride is the page stride and row_stride the stride between rows of a page.
struct KVCacheParams : AttentionParams {
  const int32_t* cache_seqlens = nullptr;
  const int32_t* cache_batch_idx = nullptr;
  const int32_t* cache_leftpad = nullptr;

  const int32_t* block_table = nullptr;  // null: contiguous cache
  int64_t block_table_batch_stride = 0;
  int page_size = 0;
  int max_pages = 0;  // columns of block_table
  int num_pages = 0;

  Operand k_new, v_new;  // ptr null: nothing to append
  int seqlen_new = 0;

  const void* rotary_cos = nullptr;  // null: no rotary
  const void* rotary_sin = nullptr;
  int64_t rotary_row_stride = 0;
  int rotary_dim = 0;
  int rotary_seqlen = 0;
  bool rotary_interleaved = false;

  // 1: no split; n: n splits; 0: the backend picks from its thread or SM count. The
  // reference ignores it (splitting does not change the result beyond rounding).
  int num_splits = 1;
  void* workspace = nullptr;
  uint64_t workspace_bytes = 0;

  bool is_paged() const { return block_table != nullptr; }
};

}  // namespace flashattn::core
