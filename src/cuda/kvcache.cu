// The CUDA KV-cache call: the plan (shared by check_kvcache, the workspace query and the run,
// so they never disagree), then on the caller's stream: append (+ rotary) into the cache, the
// padded copies when the kernels cannot read the call in place (kvcache_pad.hpp), the staged
// query when needed, the attention kernel over the updated cache, and the split-KV combine.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/backend.hpp"
#include "cuda/check.hpp"
#include "cuda/device_limits.hpp"
#include "cuda/forward_plan.hpp"
#include "cuda/kvcache_pad.hpp"
#include "cuda/kvcache_prep.hpp"
#include "cuda/kvcache_tuning.hpp"
#include "cuda/operand_traits.hpp"
#include "cuda/sm80/kv_launch.hpp"

namespace flashattn::cuda {
namespace {

Status unsupported(const std::string& what) {
  return Status(StatusCode::kUnsupported, "CUDA KV cache: " + what);
}

constexpr uint64_t kAlign = 256;

uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

struct KvPlan {
  // The call runs on zero-padded copies of q, the caches and out (kvcache_pad.hpp), placed
  // at the workspace's first 256-byte boundary; the buffers below follow them.
  bool padded = false;
  uint64_t padded_bytes = 0;  // the copies and the alignment slack
  int head_dim = 0;  // compiled head dim
  bool decode = false;
  // A cache read from row b (contiguous) or through block_table (paged) with no leftpad is,
  // for many packed rows, exactly the forward's problem with seqused_k = cache_seqlens +
  // appended: the forward kernel runs it (paged: forward_paged.cu, this family).
  bool forward_kernel = false;
  FwdKernel forward_family = FwdKernel::kNone;
  bool stage_q = false;  // q goes through an aligned (rotated) copy in the workspace
  bool dependent_combine = false;  // sm_90+: the combine overlaps the kernel (kvcache_prep)
  int num_splits = 1;
  uint64_t q_bytes = 0;
  uint64_t partial_out_bytes = 0;
  uint64_t partial_lse_bytes = 0;
  uint64_t used_keys_bytes = 0;  // int32 [batch] seqused_k of the forward kernel

  // An unpadded call's buffers also start at the workspace's first 256-byte boundary (the
  // caller's workspace need not be aligned; the kernels read the staged q 16 bytes at a time).
  uint64_t workspace_bytes() const {
    const uint64_t buffers = q_bytes + partial_out_bytes + partial_lse_bytes + used_keys_bytes;
    if (padded) return padded_bytes + buffers;
    return buffers > 0 ? kAlign + buffers : 0;
  }
};

// The kernels of a cache of q's type (kv_list.inc) and of an e4m3 cache (kv_e4m3_list.inc).
int kernel_smem_bytes(const core::KVCacheParams& p, int head_dim, bool decode) {
#define FA_KV_KERNEL(family, type, hdim)                                         \
  if (!p.kv_e4m3 && p.dtype == element_type_of<type>() && head_dim == hdim) {    \
    return family::kvcache_smem_bytes<type, hdim>(decode);                       \
  }
#include "cuda/instantiations/kv_list.inc"
#undef FA_KV_KERNEL
#define FA_KV_E4M3_KERNEL(family, type, hdim)                                    \
  if (p.kv_e4m3 && p.dtype == element_type_of<type>() && head_dim == hdim) {     \
    return family::kvcache_smem_bytes<type, hdim, __nv_fp8_e4m3>(decode);        \
  }
#include "cuda/instantiations/kv_e4m3_list.inc"
#undef FA_KV_E4M3_KERNEL
  return 0;
}

Status run_kernel(const core::KVCacheParams& p, int head_dim, const sm80::KvLaunch& launch,
                  cudaStream_t stream) {
#define FA_KV_KERNEL(family, type, hdim)                                         \
  if (!p.kv_e4m3 && p.dtype == element_type_of<type>() && head_dim == hdim) {    \
    return family::run_kvcache<type, hdim>(p, launch, stream);                   \
  }
#include "cuda/instantiations/kv_list.inc"
#undef FA_KV_KERNEL
#define FA_KV_E4M3_KERNEL(family, type, hdim)                                    \
  if (p.kv_e4m3 && p.dtype == element_type_of<type>() && head_dim == hdim) {     \
    return family::run_kvcache<type, hdim, __nv_fp8_e4m3>(p, launch, stream);    \
  }
#include "cuda/instantiations/kv_e4m3_list.inc"
#undef FA_KV_E4M3_KERNEL
  return Status(StatusCode::kInternal,
                "CUDA KV cache: no kernel for head dim " + std::to_string(head_dim));
}

// The workspace's first 256-byte boundary (nullptr stays nullptr).
unsigned char* align_workspace(unsigned char* workspace) {
  const uintptr_t misalignment = reinterpret_cast<uintptr_t>(workspace) % kAlign;
  return workspace == nullptr ? nullptr : workspace + (kAlign - misalignment) % kAlign;
}

// The staged query: [batch, seqlen_q, nheads, head_dim] at the start of the workspace.
core::Operand staged_q(const core::KVCacheParams& p, void* workspace) {
  core::Operand q;
  q.ptr = workspace;
  q.head_stride = p.head_dim;
  q.row_stride = static_cast<int64_t>(p.nheads) * p.head_dim;
  q.batch_stride = q.row_stride * p.seqlen_q;
  return q;
}

// Whether the forward kernel can run the attention of this call (choose_plan asks only for
// packed rows past the decode tile), and which family (`kernel`): a cache of q's type (the
// forward has no e4m3 cache; the KV kernel's prefill tile serves one), the keys of entry b from
// cache position 0 of row b or of its pages (no cache_batch_idx, no leftpad), out written in
// place, a compiled head dim, and the kernel fits the device.
bool forward_kernel_runs(const core::KVCacheParams& p, int device, bool stage_q,
                         FwdKernel* kernel) {
  if (p.kv_e4m3 || p.cache_batch_idx != nullptr || p.cache_leftpad != nullptr ||
      !aligned_for_kernels(p.out, false)) {
    return false;
  }
  FwdPlan forward_plan;
  core::KVCacheParams as_forward = p;
  if (stage_q) as_forward.q = staged_q(p, nullptr);
  if (!choose_kernel(as_forward, device, &forward_plan).ok() || forward_plan.padded) return false;
  if (p.is_paged() && !choose_paged_kernel(as_forward, device, &forward_plan).ok()) return false;
  // The forward kernel's block is block_m queries of one head; the KV kernel's packs the query
  // heads of a KV head. Below a full block of queries (speculative decoding, chunked prefill's
  // tail) the forward would read K/V once per query head for a block it barely fills, the KV
  // kernel once per KV head.
  if (p.seqlen_q < forward_plan.block_m) return false;
  *kernel = forward_plan.kernel;
  return true;
}

// num_splits = 0: split only while the blocks of one split fill less than the GPU. The count
// is chosen from the cache capacity (cache_seqlens may live on the device, and reading it
// would synchronize). Long decode splits over a contiguous cache run one block per SM: alone
// on its SM such a block keeps up with memory, and a second block per SM only adds contention
// and an uneven wave. Not over a paged cache: one block per SM leaves the page lookups exposed
// (bench/RESULTS.md has both measurements).
// Nor over an e4m3 cache, whose blocks convert what they read: alone on an SM they leave it
// waiting on their own instructions, and the blocks of one wave hide each other's.
// An e4m3 decode with more blocks than half a wave splits to even out its last round
// (kv_e4m3_wave_splits).
// Otherwise splits fill one wave of resident blocks (a second, partial wave costs more than
// it gains), each at least 4 key blocks long (shorter ones spend more on filling the pipeline
// and on the combine than they gain): batch 1 peaks at 16 splits for 4k keys and 32 for 32k
// and 128k, batch 8 at 4 for 4k.
int choose_splits(const core::KVCacheParams& p, bool decode, const KvTile& tile, int smem,
                  int sms, int smem_per_sm) {
  const int packed_rows = p.seqlen_q * (p.nheads / p.nheads_k);
  const int64_t blocks =
      static_cast<int64_t>((packed_rows + tile.block_m - 1) / tile.block_m) * p.nheads_k *
      p.batch;
  const int key_blocks = (p.seqlen_k + tile.block_n - 1) / tile.block_n;
  if (p.num_splits >= 1) return std::max(1, std::min({p.num_splits, key_blocks, kMaxKvSplits}));
  if (blocks == 0) return 1;
  constexpr int kLongSplit = 256;  // key blocks: 16k keys of 64
  const int64_t one_per_sm = std::min<int64_t>(sms / blocks, kMaxKvSplits);
  if (decode && !p.is_paged() && !p.kv_e4m3 && one_per_sm >= 1 &&
      key_blocks / one_per_sm >= kLongSplit) {
    return static_cast<int>(one_per_sm);
  }
  const int per_sm = std::max(1, std::min(4, smem_per_sm / (smem + 1024)));
  const int64_t slots = static_cast<int64_t>(sms) * per_sm;
  if (decode && p.kv_e4m3 && 2 * blocks > slots) {
    return kv_e4m3_wave_splits(blocks, slots, per_sm, std::min(key_blocks / 4, kMaxKvSplits));
  }
  const int64_t wanted = slots / blocks;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({wanted, key_blocks / 4,
                                                                    kMaxKvSplits})));
}

// What no plan serves, padded or not.
Status check_servable(const core::KVCacheParams& p) {
  if (p.dtype != core::ElementType::kF16 && p.dtype != core::ElementType::kBF16) {
    return unsupported("dtype: expected fp16 or bf16, got fp32 (use Backend::kCpu for fp32)");
  }
  if (p.head_dim_v != p.head_dim) {
    return unsupported("v_cache: expected head dim d_v equal to d=" + std::to_string(p.head_dim) +
                       ", got " + std::to_string(p.head_dim_v));
  }
  if (p.head_dim < 1 || p.head_dim > 256) {
    return unsupported("q: expected a head dim in [1, 256], got " + std::to_string(p.head_dim));
  }
  if (p.has_dropout()) {
    return unsupported("dropout_p: expected 0 with a KV cache, got " + std::to_string(p.dropout_p));
  }
  if (p.nheads_k > 65535 || p.batch > 65535) {
    return unsupported("q: expected batch and nheads_k <= 65535, got batch=" +
                       std::to_string(p.batch) + " nheads_k=" + std::to_string(p.nheads_k));
  }
  return Status::Ok();
}

// The kernels for a call they can read in place (d % 8 == 0, aligned caches): fills the
// plan's kernel fields and buffers, leaving its padding fields as they are.
Status choose_kernels(const core::KVCacheParams& p, int device, KvPlan* plan) {
  plan->head_dim = kv_kernel_head_dim(p.head_dim, p.kv_e4m3);
  const int packed_rows = p.seqlen_q * (p.nheads / p.nheads_k);
  plan->decode = packed_rows <= kKvDecodeMaxRows;
  const int smem = kernel_smem_bytes(p, plan->head_dim, plan->decode);
  DeviceLimits limits;
  const Status fits = check_kernel_fits("CUDA KV cache", device, plan->head_dim, smem, &limits);
  if (!fits.ok()) return fits;
  const uint64_t rows = static_cast<uint64_t>(p.batch) * p.nheads * p.seqlen_q;
  const uint64_t element = 2;
  plan->stage_q = p.rotary_cos != nullptr || !aligned_for_kernels(p.q, false);
  if (plan->stage_q) plan->q_bytes = aligned(rows * p.head_dim * element);
  plan->forward_kernel =
      !plan->decode && forward_kernel_runs(p, device, plan->stage_q, &plan->forward_family);
  if (plan->forward_kernel) {
    plan->used_keys_bytes = aligned(static_cast<uint64_t>(p.batch) * sizeof(int32_t));
    return Status::Ok();
  }
  const KvTile tile = plan->decode ? kv_decode_tile(plan->head_dim, p.kv_e4m3 ? 1 : 2)
                                   : kv_prefill_tile(plan->head_dim);
  plan->num_splits = choose_splits(p, plan->decode, tile, smem, limits.sms, limits.smem_per_sm);
  plan->dependent_combine = limits.major >= 9;
  if (plan->num_splits > 1) {
    plan->partial_out_bytes = aligned(plan->num_splits * rows * p.head_dim * sizeof(float));
    plan->partial_lse_bytes = aligned(plan->num_splits * rows * sizeof(float));
  }
  return Status::Ok();
}

Status choose_plan(const core::KVCacheParams& p, int device, KvPlan* plan) {
  *plan = KvPlan{};
  const Status servable = check_servable(p);
  if (!servable.ok()) return servable;
  if (!kvcache_needs_padding(p)) return choose_kernels(p, device, plan);
  plan->padded = true;
  plan->padded_bytes = kAlign + kvcache_padded_bytes(p);
  return choose_kernels(kvcache_padded_params(p, nullptr), device, plan);
}

Status current_plan(const core::KVCacheParams& p, KvPlan* plan) {
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return choose_plan(p, device, plan);
}

// The attention over the cache after the append, on `params` as planned: the staged query,
// the forward kernel or the KV-cache kernel, and the split-KV combine. `workspace` holds the
// plan's buffers (staged q, key counts or partials): the caller's workspace, or on the
// padding path the part of it past the copies.
Status attend(const core::KVCacheParams& params, const KvPlan& plan, unsigned char* workspace,
              cudaStream_t stream) {
  core::KVCacheParams p = params;
  if (plan.stage_q) {
    const Status staged = launch_stage_q(params, workspace, stream);
    if (!staged.ok()) return staged;
    p.q = staged_q(p, workspace);
    p.rotary_cos = p.rotary_sin = nullptr;
  }
  if (plan.forward_kernel) {
    int32_t* used_keys = reinterpret_cast<int32_t*>(workspace + plan.q_bytes);
    const Status counted = launch_used_keys(p, used_keys, stream);
    if (!counted.ok()) return counted;
    core::KVCacheParams as_forward = p;
    as_forward.seqused_k = used_keys;
    if (p.is_paged()) return forward_paged(as_forward, plan.forward_family, stream);
    return forward(as_forward, nullptr, stream);
  }
  sm80::KvLaunch launch;
  launch.decode = plan.decode;
  launch.num_splits = plan.num_splits;
  if (plan.num_splits > 1) {
    launch.partial_out = reinterpret_cast<float*>(workspace + plan.q_bytes);
    launch.partial_lse =
        reinterpret_cast<float*>(workspace + plan.q_bytes + plan.partial_out_bytes);
  }
  const Status ran = run_kernel(p, plan.head_dim, launch, stream);
  if (!ran.ok() || plan.num_splits == 1) return ran;
  return launch_combine(p, plan.num_splits, launch.partial_out, launch.partial_lse,
                        plan.dependent_combine, stream);
}

}  // namespace

bool kvcache_decodes_in_place(const core::KVCacheParams& params, int device,
                              uint64_t* workspace_bytes) {
  KvPlan plan;
  if (!choose_plan(params, device, &plan).ok() || plan.padded || !plan.decode) return false;
  *workspace_bytes = plan.workspace_bytes();
  return true;
}

Status kvcache_decode(const core::KVCacheParams& params, void* workspace, cudaStream_t stream) {
  KvPlan plan;
  const Status chosen = current_plan(params, &plan);
  if (!chosen.ok()) return chosen;
  return attend(params, plan, align_workspace(static_cast<unsigned char*>(workspace)), stream);
}

Status check_kvcache(const core::KVCacheParams& params, int device) {
  KvPlan plan;
  return choose_plan(params, device, &plan);
}

size_t kvcache_workspace_size(const core::KVCacheParams& params) {
  KvPlan plan;
  if (!current_plan(params, &plan).ok()) {
    cudaGetLastError();
    return 0;
  }
  return plan.workspace_bytes();
}

Status forward_kvcache(const core::KVCacheParams& params, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  KvPlan plan;
  const Status chosen = current_plan(params, &plan);
  if (!chosen.ok()) return chosen;
  if (plan.workspace_bytes() > 0 &&
      (params.workspace == nullptr || params.workspace_bytes < plan.workspace_bytes())) {
    return Status(StatusCode::kInvalidArgument,
                  "launch.workspace: expected " + std::to_string(plan.workspace_bytes()) +
                      " bytes for the KV-cache call, got " +
                      std::to_string(params.workspace == nullptr ? 0 : params.workspace_bytes));
  }
  if (params.batch == 0) return Status::Ok();
  // Into the caller's cache, whatever the path: the append kernel writes element by element.
  const Status appended = launch_append(params, stream);
  if (!appended.ok()) return appended;
  if (params.seqlen_q == 0 || params.nheads == 0) return Status::Ok();

  unsigned char* workspace = static_cast<unsigned char*>(params.workspace);
  if (!plan.padded) return attend(params, plan, align_workspace(workspace), stream);
  unsigned char* copies = align_workspace(workspace);
  const core::KVCacheParams padded = kvcache_padded_params(params, copies);
  const Status copied = pad_kvcache_inputs(params, padded, stream);
  if (!copied.ok()) return copied;
  const Status ran = attend(padded, plan, copies + kvcache_padded_bytes(params), stream);
  if (!ran.ok()) return ran;
  return unpad_kvcache_output(params, padded, stream);
}

}  // namespace flashattn::cuda
