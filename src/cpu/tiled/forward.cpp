// The forward driver: one task per (query block, sequence, head), longest first.
#include <omp.h>

#include "cpu/tiled/kernel_set.hpp"
#include "cpu/tiled/sequence.hpp"
#include "cpu/tiled/thread_scratch.hpp"
#include "cpu/tiled/tiled.hpp"

namespace flashattn::cpu::tiled {

Status forward(const core::AttentionParams& params) {
  const KernelSet& kernels = selected_kernels();
  const int64_t heads = static_cast<int64_t>(params.batch) * params.nheads;
  const int longest = longest_query_sequence(params);
  const int task_rows = forward_task_rows(kernels, heads, longest, omp_get_max_threads());
  const int q_tasks = (longest + task_rows - 1) / task_rows;
  const int64_t tasks = heads * q_tasks;
  if (tasks == 0) return Status::Ok();
  ThreadScratch scratch;
  Status status = scratch.allocate(kernels.forward_scratch_floats(params));
  if (!status.ok()) return status;
#pragma omp parallel
  {
    float* tiles = scratch.slice(omp_get_thread_num());
    // Head by head, so the threads share one head's keys in cache; within a head the
    // last query rows go first, since with a causal mask they see the most keys.
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t head = task / q_tasks;
      const int q_task = q_tasks - 1 - static_cast<int>(task % q_tasks);
      kernels.forward_block(params, static_cast<int>(head / params.nheads),
                            static_cast<int>(head % params.nheads), q_task * task_rows,
                            task_rows, tiles);
    }
  }
  return Status::Ok();
}

const char* isa_name() { return selected_kernels().isa; }

}  // namespace flashattn::cpu::tiled
