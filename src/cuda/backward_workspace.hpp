// The backward's workspace, carved from the caller's buffer: per (head, query row) the fp32
// D_i = dot(dO_i, O_i) and lse_i * log2(e) (+inf for a row without keys, so that its
// recomputed P is exactly 0), the fp32 dQ accumulator [rows, heads, d] (in two slices for
// some deterministic problems: bwd_deterministic_plan.hpp), and for the deterministic mode one
// int32 turn counter per (slice, batch, head, query block) and the rotated order's ticket
// counter (bwd_block_order.cuh), each on a line of its own; for GQA split among blocks
// (bwd_sm90_kv_splits) the fp32 dK and dV partials of each split.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.hpp"

namespace flashattn::cuda {

struct BwdWorkspace {
  float* dsum = nullptr;        // [nheads][total_q]
  float* lse_log2 = nullptr;    // [nheads][total_q]
  // Slice s holds the rows of the accumulator and the batch entries of the turn counters past
  // s times those of one slice: a kernel finds its slice by offsetting a row or batch index.
  float* dq_accum = nullptr;  // [slices * total_q][nheads][head_dim]
  int32_t* turns = nullptr;   // [slices * batch][nheads][query blocks][kBwdTurnStride]
  int32_t* ticket = nullptr;  // right after the turn counters
  size_t turns_bytes = 0;     // deterministic only: the turn counters and the ticket's line
  int dq_slice_bits = 0;      // log2 of the slices the kernel adds into: 0 or 1
  // Not of the workspace but decided with it (bwd_block_order.cuh; bwd_deterministic_plan.hpp):
  // the deterministic order's turn groups (0 for none), and whether it is the rotated one.
  int turn_group_blocks = 0;
  bool rotated = false;
  // GQA split among blocks (bwd_sm90_kv_splits): split s of KV head hk adds the query heads
  // [s * group / kv_splits, (s + 1) * group / kv_splits) into dk/dv_partial + s * kv_stride,
  // [kv rows][nheads_k][head_dim] fp32 (kv rows: b * seqlen_k + j dense, packed varlen).
  int kv_splits = 1;
  float* dk_partial = nullptr;
  float* dv_partial = nullptr;
  int64_t kv_stride = 0;
};

// Each turn counter on its own 128-byte line: the blocks that poll one do not contend with the
// additions to its neighbours (bench/RESULTS.md has the measurement). At most 2% of the
// accumulator's bytes (d = 32, query blocks of 64 rows).
inline constexpr int kBwdTurnStride = 32;  // ints

struct BwdWorkspaceLayout {
  size_t dsum, lse_log2, dq_accum, turns, ticket, dkv_partial, total;  // byte offsets
  size_t turns_bytes;
  int64_t kv_stride;  // floats of one split's dK (or dV) partial
};

// The rows of k and v: packed (varlen) or batch x seqlen_k.
inline int64_t bwd_kv_rows(const core::BackwardParams& p) {
  return p.cu_seqlens_k != nullptr ? p.total_k : static_cast<int64_t>(p.batch) * p.seqlen_k;
}

inline size_t bwd_align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// `dq_slices`: of the accumulator (bwd_deterministic_plan.hpp), each with its turn counters;
// `kv_splits`: of the GQA query heads (bwd_sm90_kv_splits), each with its dK/dV partials.
inline BwdWorkspaceLayout bwd_workspace_layout(const core::BackwardParams& p, int block_m,
                                               int dq_slices = 1, int kv_splits = 1) {
  BwdWorkspaceLayout l{};
  const size_t rows = static_cast<size_t>(p.total_q) * p.nheads;
  l.dsum = 0;
  l.lse_log2 = l.dsum + bwd_align_up(rows * 4);
  l.dq_accum = l.lse_log2 + bwd_align_up(rows * 4);
  l.turns = l.dq_accum + bwd_align_up(dq_slices * rows * p.head_dim * 4);
  const size_t m_blocks = (static_cast<size_t>(p.seqlen_q) + block_m - 1) / block_m;
  const size_t counters =
      p.deterministic ? dq_slices * static_cast<size_t>(p.batch) * p.nheads * m_blocks : 0;
  l.ticket = l.turns + counters * kBwdTurnStride * 4;
  l.turns_bytes = p.deterministic ? (counters + 1) * kBwdTurnStride * 4 : 0;
  l.dkv_partial = l.turns + bwd_align_up(l.turns_bytes);
  l.kv_stride = kv_splits > 1 ? bwd_kv_rows(p) * p.nheads_k * p.head_dim : 0;
  l.total = l.dkv_partial + bwd_align_up(2 * static_cast<size_t>(kv_splits) * l.kv_stride * 4);
  return l;
}

// `kernel_slices`: how many of the layout's dq_slices the kernel that runs adds into (1 or
// dq_slices); the others stay unused.
inline BwdWorkspace bwd_workspace(const core::BackwardParams& p, int block_m, int dq_slices = 1,
                                  int kernel_slices = 1, int kv_splits = 1) {
  const BwdWorkspaceLayout l = bwd_workspace_layout(p, block_m, dq_slices, kv_splits);
  char* base = static_cast<char*>(p.workspace);
  BwdWorkspace w;
  w.dsum = reinterpret_cast<float*>(base + l.dsum);
  w.lse_log2 = reinterpret_cast<float*>(base + l.lse_log2);
  w.dq_accum = reinterpret_cast<float*>(base + l.dq_accum);
  w.turns = reinterpret_cast<int32_t*>(base + l.turns);
  w.turns_bytes = l.turns_bytes;
  w.ticket = reinterpret_cast<int32_t*>(base + l.ticket);
  w.dq_slice_bits = kernel_slices == 2 ? 1 : 0;
  w.kv_splits = kv_splits;
  w.kv_stride = l.kv_stride;
  if (kv_splits > 1) {
    w.dk_partial = reinterpret_cast<float*>(base + l.dkv_partial);
    w.dv_partial = w.dk_partial + kv_splits * l.kv_stride;
  }
  return w;
}

}  // namespace flashattn::cuda
