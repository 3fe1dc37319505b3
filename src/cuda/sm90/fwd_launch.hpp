// Host entry points of the sm90 (wgmma + TMA) forward kernel, one per (element type, head dim)
// of kFwdSm90HeadDims; each is defined in a generated file of src/cuda/instantiations/
// (scripts/codegen.py). Same contract as sm80/fwd_launch.hpp, with two more conditions the
// plan checks: the device runs sm_90a code (DeviceLimits::sm90a), and forward_accepts().
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/params.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda/forward_tuning.hpp"
#include "flashattn/flashattn.hpp"

namespace flashattn::cuda::sm90 {

// The dispatch's view of the family (forward.cu): it needs sm_90a code, and the smaller of
// its two tiles of queries for head dim D (fwd_sm90_tile).
inline constexpr bool kFwdNeedsSm90a = true;
inline constexpr FwdKernel kFwdKernel = FwdKernel::kSm90;
template <int D>
constexpr int forward_block_m() {
  const int narrow = fwd_sm90_tile(D, D, true).block_m;
  const int other = fwd_sm90_tile(D, D, false).block_m;
  return narrow < other ? narrow : other;
}

// Whether the family takes the call: the TMA loads can address q, k and v in place (positive
// strides wherever the dimension has more than one entry; the caller has already made them
// 16-byte aligned), the tile count fits an int, and the tuning table does not say the sm80
// kernel is faster for it.
inline bool forward_accepts(const core::AttentionParams& p) {
  if (!fwd_sm90_faster(p.head_dim, p.keys_grow_with_rows(), p.seqlen_k)) return false;
  const bool varlen = p.is_varlen();
  auto positive = [&](const core::Operand& op, int heads) {
    return op.row_stride > 0 && (heads == 1 || op.head_stride > 0) &&
           (varlen || p.batch == 1 || op.batch_stride > 0);
  };
  const int64_t min_block_m = 128;
  const int64_t tiles = static_cast<int64_t>(p.batch) * p.nheads *
                        ((p.seqlen_q + min_block_m - 1) / min_block_m);
  return positive(p.q, p.nheads) && positive(p.k, p.nheads_k) && positive(p.v, p.nheads_k) &&
         tiles < (int64_t{1} << 31);
}

// The paged prefill (a KV cache's block_table, see sm80/fwd_launch.hpp): what the dense
// forward needs of q and of the cache's rows, and positive page strides where there are pages.
inline bool forward_paged_accepts(const core::KVCacheParams& p) {
  return forward_accepts(p) && p.page_size % 16 == 0 &&
         (p.num_pages == 1 || (p.k.batch_stride > 0 && p.v.batch_stride > 0));
}
template <int D>
constexpr int forward_paged_block_m() {
  return forward_block_m<D>();
}

// kDropout: the call has dropout (its own instantiation, which never packs GQA).
template <class T, int D, bool kDropout>
Status run_forward(const core::AttentionParams& params, cudaStream_t stream);

template <class T, int D>
int forward_smem_bytes();

template <class T, int D>
Status run_forward_paged(const core::KVCacheParams& params, cudaStream_t stream);

template <class T, int D>
int forward_paged_smem_bytes();

// The FP8 forward (e4m3 q, k and v; out of type T), for D in kFwdSm90Fp8HeadDims; defined in
// instantiations/fwd_fp8_sm90_hdim<D>.cu, both output types in one file. It reads q, k and v
// in place, so they must meet forward_fp8_accepts.
inline constexpr FwdKernel kFwdFp8Kernel = FwdKernel::kSm90Fp8;
template <int D>
constexpr int forward_fp8_block_m() {
  const int narrow = fwd_sm90_fp8_tile(D, true).block_m;
  const int other = fwd_sm90_fp8_tile(D).block_m;
  return narrow < other ? narrow : other;
}

// TMA reads the operands in place: 16-byte aligned pointers and strides (16 e4m3 elements),
// positive where the dimension has more than one entry; and the tile count fits an int.
inline bool forward_fp8_accepts(const core::AttentionParams& p, std::string* why) {
  const bool varlen = p.is_varlen();
  auto fits = [&](const core::Operand& op, int heads) {
    const bool aligned = reinterpret_cast<uintptr_t>(op.ptr) % 16 == 0 &&
                         op.row_stride % 16 == 0 && op.head_stride % 16 == 0 &&
                         (varlen || op.batch_stride % 16 == 0);
    const bool positive = op.row_stride > 0 && (heads == 1 || op.head_stride > 0) &&
                          (varlen || p.batch == 1 || op.batch_stride > 0);
    return aligned && positive;
  };
  const struct {
    const core::Operand& op;
    int heads;
    const char* name;
  } operands[] = {{p.q, p.nheads, "q"}, {p.k, p.nheads_k, "k"}, {p.v, p.nheads_k, "v"}};
  for (const auto& o : operands) {
    if (!fits(o.op, o.heads)) {
      *why = std::string(o.name) +
             ": expected a 16-byte aligned e4m3 tensor with strides that are positive multiples "
             "of 16 elements (the FP8 kernel reads it in place)";
      return false;
    }
  }
  const int64_t block_m = 128;
  const int64_t tiles = static_cast<int64_t>(p.batch) * p.nheads *
                        ((p.seqlen_q + block_m - 1) / block_m);
  if (tiles >= (int64_t{1} << 31)) {
    *why = "q: too many query tiles for the FP8 kernel";
    return false;
  }
  return true;
}

template <class T, int D>
Status run_forward_fp8(const core::AttentionParams& params, cudaStream_t stream);

template <class T, int D>
int forward_fp8_smem_bytes();

}  // namespace flashattn::cuda::sm90
