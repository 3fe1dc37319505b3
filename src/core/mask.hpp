// Visibility and position bias, shared by every backend (docs/contract.md steps 3 and 4).
// Row i of a sequence with seqlen_q queries and seqlen_k keys is aligned to the bottom
// right: its "diagonal" key is i + seqlen_k - seqlen_q.
#pragma once

#include "core/platform.hpp"

namespace flashattn::core {

// Half-open range of keys row `row` may see; empty (begin == end) for a fully masked row.
struct KeyRange {
  int begin;
  int end;
};

FA_HOST_DEVICE KeyRange visible_keys(int row, int seqlen_q, int seqlen_k, int window_left,
                                     int window_right) {
  const long long diagonal = static_cast<long long>(row) + seqlen_k - seqlen_q;
  long long begin = window_left < 0 ? 0 : diagonal - window_left;
  long long end = window_right < 0 ? seqlen_k : diagonal + window_right + 1;
  begin = begin < 0 ? 0 : begin;
  end = end > seqlen_k ? seqlen_k : end;
  if (end < begin) end = begin;
  return {static_cast<int>(begin), static_cast<int>(end)};
}

FA_HOST_DEVICE bool key_visible(int row, int col, int seqlen_q, int seqlen_k, int window_left,
                                int window_right) {
  const KeyRange r = visible_keys(row, seqlen_q, seqlen_k, window_left, window_right);
  return col >= r.begin && col < r.end;
}

// key_visible for a key col >= 0 from its distance to the row's diagonal (row + seqlen_k -
// seqlen_q - col), which the backward kernels have at hand for ALiBi
// (tests/cpp/test_mask_rule.cpp: the two agree).
FA_HOST_DEVICE bool key_visible_at_distance(int distance, int col, int seqlen_k,
                                            int window_left, int window_right) {
  return col < seqlen_k && (window_left < 0 || distance <= window_left) &&
         (window_right < 0 || distance >= -window_right);
}

// ALiBi: -slope * |i + seqlen_k - seqlen_q - j|.
FA_HOST_DEVICE float alibi_bias(float slope, int row, int col, int seqlen_q, int seqlen_k) {
  long long distance = static_cast<long long>(row) + seqlen_k - seqlen_q - col;
  if (distance < 0) distance = -distance;
  return -slope * static_cast<float>(distance);
}

}  // namespace flashattn::core
