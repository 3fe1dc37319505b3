// Where the rows of sequence b live in the caller's strided tensors, for dense and
// varlen calls alike: every backend finds q/k/v/out rows and lse entries through this.
#pragma once

#include <cstdint>

#include "core/params.hpp"
#include "core/platform.hpp"

namespace flashattn::core {

// Dense: rows 0.. of batch entry b. Varlen: rows cu_seqlens[b].. with no batch stride.
struct SequenceRows {
  int64_t batch = 0;  // multiplier of batch_stride (0 for varlen)
  int64_t q_row0 = 0;
  int64_t k_row0 = 0;
  int seqlen_q = 0;
  int seqlen_k = 0;  // keys attended: seqused_k[b] when given
  int rows_k = 0;    // rows of k/v that belong to the sequence (their dk/dv are written)
};

FA_HOST_DEVICE SequenceRows sequence_rows(const AttentionParams& params, int b) {
  SequenceRows seq;
  if (params.cu_seqlens_q != nullptr) {  // is_varlen(), callable from device code
    seq.q_row0 = params.cu_seqlens_q[b];
    seq.k_row0 = params.cu_seqlens_k[b];
    seq.seqlen_q = params.cu_seqlens_q[b + 1] - params.cu_seqlens_q[b];
    seq.rows_k = params.cu_seqlens_k[b + 1] - params.cu_seqlens_k[b];
  } else {
    seq.batch = b;
    seq.seqlen_q = params.seqlen_q;
    seq.rows_k = params.seqlen_k;
  }
  seq.seqlen_k = params.seqused_k != nullptr ? params.seqused_k[b] : seq.rows_k;
  if (seq.seqlen_k > seq.rows_k) seq.rows_k = seq.seqlen_k;
  return seq;
}

FA_HOST_DEVICE int64_t element_offset(const Operand& op, int64_t batch, int64_t row,
                                      int64_t head) {
  return batch * op.batch_stride + row * op.row_stride + head * op.head_stride;
}

// Index of row `row` of head `head` in lse (dense [b, h, sq], varlen [h, total_q]).
FA_HOST_DEVICE int64_t lse_offset(const AttentionParams& params, const SequenceRows& seq,
                                  int head, int row) {
  return seq.batch * params.lse_batch_stride + head * params.lse_head_stride + seq.q_row0 +
         row;
}

}  // namespace flashattn::core
