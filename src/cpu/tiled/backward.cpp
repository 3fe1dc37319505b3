// The backward driver. Two plans with the same bits (backward_kernels.hpp):
//   two passes: the dK/dV pass (one task per few key blocks, sequence and KV head) and the
//     dQ pass (one task per few query blocks, sequence and head);
//   one pass: one task per (sequence, KV head), each pair's P and dS computed once for
//     dK, dV and dQ, with the sequence's K/V tiles and their dK and dV in the scratch.
// Each output row is written by exactly one task, so the result is the same run to run
// whatever the schedule (and the number of blocks per task, which follows the thread
// count, changes no result).
#include <omp.h>

#include <atomic>

#include "cpu/tiled/kernel_set.hpp"
#include "cpu/tiled/sequence.hpp"
#include "cpu/tiled/thread_scratch.hpp"
#include "cpu/tiled/tiled.hpp"

namespace flashattn::cpu::tiled {
namespace {

std::atomic<BackwardPlan> forced_plan{BackwardPlan::kAutomatic};

// The most scratch per thread the one pass takes (its K/V tiles grow with the sequence);
// longer sequences run the two passes, whose scratch is a few tiles.
constexpr size_t kOnePassScratchBytes = size_t{32} << 20;

// The one pass has only batch x KV head tasks, each a whole head group: it runs when they
// keep every thread busy to the end, as many tasks as threads and either a multiple of
// them or enough that the last round is short.
bool one_pass_suits(const core::BackwardParams& params, size_t scratch_floats, int threads) {
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads_k;
  const bool balanced = tasks >= threads && (tasks % threads == 0 || tasks >= 4 * threads);
  return balanced && scratch_floats * sizeof(float) <= kOnePassScratchBytes;
}

void one_pass(const core::BackwardParams& params, const KernelSet& kernels,
              const ThreadScratch& scratch) {
  const int64_t tasks = static_cast<int64_t>(params.batch) * params.nheads_k;
#pragma omp parallel
  {
    float* tiles = scratch.slice(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      kernels.backward_one_pass(params, static_cast<int>(task / params.nheads_k),
                                static_cast<int>(task % params.nheads_k), tiles);
    }
  }
}

Status two_passes(const core::BackwardParams& params, const KernelSet& kernels, int threads) {
  ThreadScratch scratch;
  Status status = scratch.allocate(kernels.backward_scratch_floats(params));
  if (!status.ok()) return status;

  const int k_blocks =
      (longest_key_sequence(params) + kernels.backward_keys - 1) / kernels.backward_keys;
  const int64_t kv_heads = static_cast<int64_t>(params.batch) * params.nheads_k;
  const int k_group = backward_task_blocks(kernels, kv_heads, k_blocks, threads);
  const int k_tasks_per_head = (k_blocks + k_group - 1) / k_group;
  const int64_t kv_tasks = kv_heads * k_tasks_per_head;
  const int q_blocks =
      (longest_query_sequence(params) + kernels.backward_rows - 1) / kernels.backward_rows;
  const int64_t heads = static_cast<int64_t>(params.batch) * params.nheads;
  const int q_group = backward_task_blocks(kernels, heads, q_blocks, threads);
  const int q_tasks_per_head = (q_blocks + q_group - 1) / q_group;
  const int64_t q_tasks = heads * q_tasks_per_head;
#pragma omp parallel
  {
    float* tiles = scratch.slice(omp_get_thread_num());
    // Head by head, so the threads share one head's inputs in cache; within a head the
    // long tasks go first (with a causal mask the first key blocks are seen by the most
    // queries, and the last query blocks see the most keys).
#pragma omp for schedule(dynamic, 1) nowait  // the dQ pass reads nothing the dK/dV pass writes
    for (int64_t task = 0; task < kv_tasks; ++task) {
      const int64_t head = task / k_tasks_per_head;
      const int k_block = static_cast<int>(task % k_tasks_per_head) * k_group;
      kernels.backward_dkdv_block(params, static_cast<int>(head / params.nheads_k),
                                  static_cast<int>(head % params.nheads_k), k_block, k_group,
                                  tiles);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < q_tasks; ++task) {
      const int64_t head = task / q_tasks_per_head;
      const int q_block =
          (q_tasks_per_head - 1 - static_cast<int>(task % q_tasks_per_head)) * q_group;
      kernels.backward_dq_block(params, static_cast<int>(head / params.nheads),
                                static_cast<int>(head % params.nheads), q_block, q_group,
                                tiles);
    }
  }
  return Status::Ok();
}

}  // namespace

void force_backward_plan(BackwardPlan plan) {
  forced_plan.store(plan, std::memory_order_relaxed);
}

Status backward(const core::BackwardParams& params) {
  const KernelSet& kernels = selected_kernels();
  const int threads = omp_get_max_threads();
  const BackwardPlan plan = forced_plan.load(std::memory_order_relaxed);
  if (plan != BackwardPlan::kTwoPasses) {
    const size_t floats = kernels.backward_one_pass_scratch_floats(params);
    ThreadScratch scratch;
    // Without the memory for it, the two passes give the same bits in a few tiles.
    if ((plan == BackwardPlan::kOnePass || one_pass_suits(params, floats, threads)) &&
        scratch.allocate(floats).ok()) {
      one_pass(params, kernels, scratch);
      return Status::Ok();
    }
  }
  return two_passes(params, kernels, threads);
}

}  // namespace flashattn::cpu::tiled
