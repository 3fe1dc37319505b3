// thread:: the backward's element-wise step, one (key, query) element of the block: from the
// recomputed raw score S^T and the product dP^T = (V dO^T) to P^T (the operand of dV = P^T dO)
// and dS^T (the operand of dK = dS^T Q and dQ = dS K). The only place where either is formed.
//   P  = exp2(S * log2_unit - lse2)        (softcap / ALiBi / mask as the forward)
//   dS = P o (dP - D) [o (1 - tanh^2)]     (softcap: the tanh derivative)
#pragma once

#include "cuda/prim/math.cuh"
#include "cuda/common/score_transform.cuh"

namespace flashattn::cuda::thread {

struct BwdElement {
  float p;   // P^T
  float ds;  // dS^T, unscaled (dK and dQ are scaled once at the end)
};

// P^T alone, for a kernel that forms it before dP^T is ready; its dS^T is then p (dp - D),
// valid only without softcap (whose dS^T needs the tanh derivative: bwd_element).
__device__ __forceinline__ float bwd_probability(float raw, float lse2, const ScoreScales& sc,
                                                 float alibi_raw, int distance, bool visible) {
  if (alibi_raw != 0.f) raw -= alibi_raw * fabsf(static_cast<float>(distance));
  const float p = prim::thread::exp2_approx(fmaf(raw, sc.log2_unit, -lse2));
  return visible ? p : 0.f;
}

// `alibi_raw`: the slope in raw-score units (0: no ALiBi); `distance`: query + seqlen_k -
// seqlen_q - key; `visible`: the key is inside the query's mask window.
__device__ __forceinline__ BwdElement bwd_element(float raw, float dp, float lse2, float dsum,
                                                  const ScoreScales& sc, float alibi_raw,
                                                  int distance, bool visible) {
  float dtanh = 1.f;
  if (sc.softcap_pre != 0.f) {
    raw = prim::thread::tanh_exp2(raw * sc.softcap_pre);
    dtanh = 1.f - raw * raw;
  }
  const float p = bwd_probability(raw, lse2, sc, alibi_raw, distance, visible);
  return {p, p * (dp - dsum) * dtanh};
}

}  // namespace flashattn::cuda::thread
