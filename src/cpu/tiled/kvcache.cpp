// The KV-cache driver: append the new keys/values (rotated) into the cache, attend with
// one task per (batch entry, KV head, query rows, split) serving the KV head's GQA group,
// then merge the splits' partial outputs with the shared online-softmax merge
// (core/softmax_state.hpp).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/numeric.hpp"
#include "core/softmax_state.hpp"
#include "cpu/tiled/kernel_set.hpp"
#include "cpu/tiled/sequence.hpp"
#include "cpu/tiled/thread_scratch.hpp"
#include "cpu/tiled/tiled.hpp"

namespace flashattn::cpu::tiled {
namespace {

// Writes k_new/v_new row t of (b, hk) at cache position cache_seqlens[b] + t, the key
// rotated in double and rounded once, exactly as the reference. O(new rows): scalar.
void append_new_keys(const core::KVCacheParams& params) {
  const int rows = appended_rows(params);
  if (rows == 0) return;
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads_k;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < tasks; ++task) {
    const int b = static_cast<int>(task / params.nheads_k);
    const int hk = static_cast<int>(task % params.nheads_k);
    double x[kMaxHeadDim];
    for (int t = 0; t < rows; ++t) {
      const int position = params.cache_seqlens[b] + t;
      const int64_t k_src = element_offset(params.k_new, b, t, hk);
      const int64_t k_dst = cache_offset(params, params.k, b, position, hk);
      for (int c = 0; c < params.head_dim; ++c) {
        x[c] = core::load_element(params.k_new.ptr, k_src + c, params.dtype);
      }
      if (params.rotary_cos != nullptr) rotate(params, position, x);
      const float k_descale = params.k_descale.at(b, hk);
      for (int c = 0; c < params.head_dim; ++c) {
        core::store_element(params.k.ptr, k_dst + c, params.kv_type(),
                            core::appended_value(static_cast<float>(x[c]), params.kv_e4m3,
                                                 k_descale));
      }
      const int64_t v_src = element_offset(params.v_new, b, t, hk);
      const int64_t v_dst = cache_offset(params, params.v, b, position, hk);
      const float v_descale = params.v_descale.at(b, hk);
      for (int c = 0; c < params.head_dim_v; ++c) {
        const float value = core::load_element(params.v_new.ptr, v_src + c, params.dtype);
        core::store_element(params.v.ptr, v_dst + c, params.kv_type(),
                            core::appended_value(value, params.kv_e4m3, v_descale));
      }
    }
  }
}

// Query rows per task: enough that the group's heads x rows fill the task's query
// blocks, fewer when that would leave threads without work.
int kvcache_task_rows(const KernelSet& kernels, int64_t kv_heads, int group, int seqlen_q,
                      int threads) {
  const int columns = kernels.max_group * kernels.block_q;
  int rows = std::clamp(columns / group, 1, std::max(1, seqlen_q));
  while (rows > kernels.block_q &&
         kv_heads * ((seqlen_q + rows - 1) / rows) < 4 * static_cast<int64_t>(threads)) {
    rows -= kernels.block_q;
  }
  return rows;
}

// num_splits as asked; 0 (the library picks) splits the keys only when the other
// dimensions leave threads idle, as flash-decoding does.
int choose_splits(const core::KVCacheParams& params, int64_t tasks, int block_k) {
  int longest = 0;
  for (int b = 0; b < params.batch; ++b) longest = std::max(longest, cache_keys(params, b));
  const int key_blocks = std::max(1, (longest + block_k - 1) / block_k);
  int splits = params.num_splits;
  if (splits <= 0) {
    const int64_t threads = omp_get_max_threads();
    splits = tasks >= 2 * threads ? 1 : static_cast<int>((2 * threads + tasks - 1) / tasks);
  }
  return std::clamp(splits, 1, key_blocks);
}

// out = sum over splits of exp(lse_s - lse) * out_s, lse = log(sum of exp(lse_s)).
void merge_splits(const core::KVCacheParams& params, const SplitPartials& partials) {
  const int64_t rows = static_cast<int64_t>(params.batch) * params.nheads * params.seqlen_q;
  const int dv = params.head_dim_v;
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const int i = static_cast<int>(row % params.seqlen_q);
    const int64_t head = row / params.seqlen_q;  // b * nheads + h
    const int b = static_cast<int>(head / params.nheads);
    const int h = static_cast<int>(head % params.nheads);
    const auto part = [&](int split) {
      return (head * partials.splits + split) * params.seqlen_q + i;
    };
    float total = -INFINITY;
    for (int s = 0; s < partials.splits; ++s) {
      total = core::log_add_exp(total, partials.lse[part(s)]);
    }
    float merged[kMaxHeadDim] = {};
    for (int s = 0; s < partials.splits; ++s) {
      // An empty part adds nothing. A part whose weight underflows to 0 is still added
      // (0 * out): a NaN it saw reaches the row, as 0 * NaN does without a split.
      if (partials.lse[part(s)] == -INFINITY) continue;
      const float weight = core::merge_weight(partials.lse[part(s)], total);
      const float* out = partials.out + part(s) * dv;
      for (int c = 0; c < dv; ++c) merged[c] += weight * out[c];
    }
    const int64_t out_offset = element_offset(params.out, b, i, h);
    for (int c = 0; c < dv; ++c) {
      core::store_element(params.out.ptr, out_offset + c, params.dtype, merged[c]);
    }
    if (params.lse != nullptr) {
      params.lse[b * params.lse_batch_stride + h * params.lse_head_stride + i] = total;
    }
  }
}

}  // namespace

Status forward_kvcache(const core::KVCacheParams& params) {
  append_new_keys(params);

  const KernelSet& kernels = selected_kernels();
  // A task serves all query heads of one KV head (its GQA group) over task_rows rows.
  const int64_t kv_heads = static_cast<int64_t>(params.batch) * params.nheads_k;
  const int group = params.nheads / params.nheads_k;
  const int task_rows = kvcache_task_rows(kernels, kv_heads, group, params.seqlen_q,
                                          omp_get_max_threads());
  const int q_tasks = (params.seqlen_q + task_rows - 1) / task_rows;
  const int64_t blocks = kv_heads * q_tasks;
  if (blocks == 0) return Status::Ok();

  SplitPartials partials;
  partials.splits = choose_splits(params, blocks, kernels.block_k);
  FloatBuffer partial_memory;
  if (partials.splits > 1) {
    const size_t rows = static_cast<size_t>(params.batch) * params.nheads * partials.splits *
                        params.seqlen_q;
    Status status = partial_memory.allocate(rows * (params.head_dim_v + 1));
    if (!status.ok()) return status;
    partials.out = partial_memory.data();
    partials.lse = partials.out + rows * params.head_dim_v;
  }
  ThreadScratch scratch;
  Status status = scratch.allocate(kernels.kvcache_scratch_floats(params));
  if (!status.ok()) return status;

  const int64_t tasks = blocks * partials.splits;
#pragma omp parallel
  {
    float* tiles = scratch.slice(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int split = static_cast<int>(task % partials.splits);
      const int64_t block = task / partials.splits;
      const int64_t kv_head = block / q_tasks;
      const int q_task = q_tasks - 1 - static_cast<int>(block % q_tasks);
      kernels.kvcache_block(params, partials, static_cast<int>(kv_head / params.nheads_k),
                            static_cast<int>(kv_head % params.nheads_k), q_task * task_rows,
                            task_rows, split, tiles);
    }
  }
  if (partials.splits > 1) merge_splits(params, partials);
  return Status::Ok();
}

}  // namespace flashattn::cpu::tiled
