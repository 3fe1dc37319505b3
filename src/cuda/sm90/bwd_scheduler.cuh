// The steps a Hopper backward block walks, one per (query head of its KV head, query block):
// the query blocks that visit its key block (BwdSequence's order, rotated or not) of its first
// query head, then of the next, up to the last of its GQA split. The MMA warpgroups and the dQ
// writer walk them alike, each from its own copy of the position.
#pragma once

namespace flashattn::cuda::sm90 {

template <class Sequence>
struct BwdStepOrder {
  const Sequence& seq;
  int g_begin, g_end;  // the query heads (of the KV head's group) of this block
  int m_first;         // the first query block of each head
  int m_blocks;        // of the sequence; the position past the last step

  __device__ __forceinline__ BwdStepOrder(const Sequence& s, int begin, int end)
      : seq(s),
        g_begin(begin),
        g_end(end),
        m_first(s.first_query_block()),
        m_blocks(s.m_blocks) {}

  __device__ __forceinline__ void advance(int& g, int& m) const {
    m = seq.next_query_block(m);
    if (m >= m_blocks) {
      ++g;
      m = g < g_end ? m_first : m_blocks;
    }
  }
};

}  // namespace flashattn::cuda::sm90
