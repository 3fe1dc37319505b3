// The tiled kernels of one instruction set, as a table of plain functions. The drivers
// (forward.cpp, backward.cpp, kvcache.cpp) are compiled once for the baseline ISA: they
// enumerate the blocks, run them in parallel and call the table of the best ISA the CPU
// has (isa_select.cpp). Each block function is serial and writes only its own outputs,
// so the results do not depend on the schedule.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/params.hpp"

namespace flashattn::cpu::tiled {

// What a split-KV block writes instead of the output: its own normalized output and lse,
// merged afterwards by kvcache.cpp. Part (b, h, split) row i is at
// out[((b * nheads + h) * splits + split) * seqlen_q + i] (rows of head_dim_v floats).
struct SplitPartials {
  int splits = 1;
  float* out = nullptr;  // [b, h, splits, sq, dv]
  float* lse = nullptr;  // [b, h, splits, sq]
};

struct KernelSet {
  const char* isa;     // "amx", "avx512bf16", "avx512", "avx2" or "generic"
  int block_q;         // query rows per block
  int max_group;       // query blocks a forward/kvcache task can share K/V tiles between
  int backward_rows;   // query rows per backward_dq_block block
  int backward_keys;   // keys per backward_dkdv_block block
  int backward_group;  // blocks a backward task can share loads between
  int block_k;         // keys per tile (split-KV splits whole tiles)

  // Floats of per-thread scratch each block function needs (64-byte aligned).
  size_t (*forward_scratch_floats)(const core::AttentionParams& params);
  size_t (*backward_scratch_floats)(const core::BackwardParams& params);
  size_t (*kvcache_scratch_floats)(const core::KVCacheParams& params);
  size_t (*backward_one_pass_scratch_floats)(const core::BackwardParams& params);

  // Query rows [row0, row0 + rows) of (sequence b, head h), rows <= max_group * block_q:
  // out and lse.
  void (*forward_block)(const core::AttentionParams& params, int b, int h, int row0, int rows,
                        float* scratch);
  // Key blocks [k_block, k_block + blocks) of backward_keys keys, blocks <= backward_group,
  // of (sequence b, KV head hk): dk and dv, summed over the group of query heads.
  void (*backward_dkdv_block)(const core::BackwardParams& params, int b, int hk, int k_block,
                              int blocks, float* scratch);
  // Query blocks [q_block, q_block + blocks) of backward_rows rows, blocks <=
  // backward_group, of (sequence b, head h): dq.
  void (*backward_dq_block)(const core::BackwardParams& params, int b, int h, int q_block,
                            int blocks, float* scratch);
  // Every block of (sequence b, KV head hk) in one pass: dk and dv, and dq of the group's
  // query heads, with the bits of backward_dkdv_block and backward_dq_block.
  void (*backward_one_pass)(const core::BackwardParams& params, int b, int hk, float* scratch);
  // Query rows [row0, row0 + rows) of every query head of (batch entry b, KV head hk),
  // (nheads / nheads_k) * rows <= max_group * block_q, over split `split` of their keys
  // (after the new keys were appended); writes out/lse when partials.splits == 1.
  void (*kvcache_block)(const core::KVCacheParams& params, const SplitPartials& partials,
                        int b, int hk, int row0, int rows, int split, float* scratch);
};

// Query rows per forward task: as many blocks as share K/V tiles well, fewer when that
// would leave threads without work.
inline int forward_task_rows(const KernelSet& kernels, int64_t heads, int longest_seqlen_q,
                             int threads) {
  int group = kernels.max_group;
  const auto tasks = [&](int g) {
    const int64_t rows = static_cast<int64_t>(g) * kernels.block_q;
    return heads * ((longest_seqlen_q + rows - 1) / rows);
  };
  while (group > 1 && tasks(group) < 4 * static_cast<int64_t>(threads)) --group;
  return group * kernels.block_q;
}

// Blocks per backward task (of `blocks` per head, over `heads` heads): as many as share
// loads well, fewer when that would leave threads without work. The results do not depend
// on it.
inline int backward_task_blocks(const KernelSet& kernels, int64_t heads, int blocks,
                                int threads) {
  int group = kernels.backward_group;
  const auto tasks = [&](int g) { return heads * ((blocks + g - 1) / g); };
  while (group > 1 && tasks(group) < 4 * static_cast<int64_t>(threads)) --group;
  return group;
}

const KernelSet& generic_kernels();
const KernelSet& avx2_kernels();
const KernelSet& avx512_kernels();
const KernelSet& avx512_bf16_kernels();
const KernelSet& amx_kernels();

// Wider is later. kAvx512Bf16 and kAmx differ from kAvx512 in bf16 calls only (their tile
// products multiply bf16 in hardware); fp32 and fp16 calls run the AVX-512 kernels.
enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3, kAmx = 4 };

// The ISA calls use unless told otherwise: the widest this CPU (and OS) supports, except
// kAvx512Bf16 (see isa_select.cpp); kGeneric off x86-64.
Isa best_supported_isa();
bool isa_supported(Isa isa);
// The kernels calls use: the best supported ISA, or the one forced by force_isa() or by
// the environment variable FLASHATTN_CPU_ISA=generic|avx2|avx512|avx512bf16|amx (if
// supported).
const KernelSet& selected_kernels();
// Tests and benchmarks: run every later call with `isa` (ignored if unsupported);
// reset_isa() goes back to the automatic choice (and drops a forced kernel set).
void force_isa(Isa isa);
void reset_isa();
// Tests: run every later call with `kernels` (the emulated builds of the wide ISAs), until
// reset_isa().
void force_kernels(const KernelSet* kernels);

}  // namespace flashattn::cpu::tiled
