// The literal implementation of docs/contract.md: scores materialized per row, fp64 accumulation,
// analytic gradients. For tests and `--check` only; host memory only. Inputs are read
// through the strides of the params; outputs are written in their dtype.
#pragma once

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cpu {

enum class ReferencePrecision {
  kExact,             // fp64 throughout
  kLowPrecisionNaive  // the naive algorithm in fp32 with P rounded to the input dtype:
                      // the yardstick of the tolerance rule (docs/design.md)
};

Status reference_forward(const core::AttentionParams& params,
                         ReferencePrecision precision = ReferencePrecision::kExact);
Status reference_backward(const core::BackwardParams& params,
                          ReferencePrecision precision = ReferencePrecision::kExact);
// Appends k_new/v_new (rotated) into the cache in place, then attends.
Status reference_forward_kvcache(const core::KVCacheParams& params,
                                 ReferencePrecision precision = ReferencePrecision::kExact);

}  // namespace flashattn::cpu
