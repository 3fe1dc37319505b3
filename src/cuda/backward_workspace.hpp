// The backward's workspace, carved from the caller's buffer: per (head, query row) the fp32
// D_i = dot(dO_i, O_i) and lse_i * log2(e) (+inf for a row without keys, so that its
// recomputed P is exactly 0), the fp32 dQ accumulator [rows, heads, d], and for the
// deterministic mode one int32 turn counter per (batch, head, query block).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.hpp"

namespace flashattn::cuda {

struct BwdWorkspace {
  float* dsum = nullptr;        // [nheads][total_q]
  float* lse_log2 = nullptr;    // [nheads][total_q]
  float* dq_accum = nullptr;    // [total_q][nheads][head_dim]
  int32_t* turns = nullptr;     // [batch][nheads][query blocks]; deterministic only
  size_t turns_bytes = 0;
};

struct BwdWorkspaceLayout {
  size_t dsum, lse_log2, dq_accum, turns, total;  // byte offsets
  size_t turns_bytes;
};

inline size_t bwd_align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

inline BwdWorkspaceLayout bwd_workspace_layout(const core::BackwardParams& p, int block_m) {
  BwdWorkspaceLayout l{};
  const size_t rows = static_cast<size_t>(p.total_q) * p.nheads;
  l.dsum = 0;
  l.lse_log2 = l.dsum + bwd_align_up(rows * 4);
  l.dq_accum = l.lse_log2 + bwd_align_up(rows * 4);
  l.turns = l.dq_accum + bwd_align_up(rows * p.head_dim * 4);
  const size_t m_blocks = (static_cast<size_t>(p.seqlen_q) + block_m - 1) / block_m;
  l.turns_bytes =
      p.deterministic ? static_cast<size_t>(p.batch) * p.nheads * m_blocks * 4 : 0;
  l.total = l.turns + bwd_align_up(l.turns_bytes);
  return l;
}

inline BwdWorkspace bwd_workspace(const core::BackwardParams& p, int block_m) {
  const BwdWorkspaceLayout l = bwd_workspace_layout(p, block_m);
  char* base = static_cast<char*>(p.workspace);
  BwdWorkspace w;
  w.dsum = reinterpret_cast<float*>(base + l.dsum);
  w.lse_log2 = reinterpret_cast<float*>(base + l.lse_log2);
  w.dq_accum = reinterpret_cast<float*>(base + l.dq_accum);
  w.turns = reinterpret_cast<int32_t*>(base + l.turns);
  w.turns_bytes = l.turns_bytes;
  return w;
}

}  // namespace flashattn::cuda
