// flashattn: exact attention (FlashAttention-2) for C++17, on NVIDIA GPUs and on the CPU.
//
// The caller owns every buffer: inputs, outputs and workspace are described by
// `Tensor` views (pointer, dtype, device, shape, strides in elements), and the CUDA
// stream is the caller's. No entry point allocates, synchronizes, throws or aborts:
// each returns a `Status`, and on a rejected call nothing has been written.
//
// What each entry point computes is defined in docs/contract.md; layouts in brief:
//   dense : q [b, sq, h, d]   k [b, sk, hk, d]   v [b, sk, hk, dv]   out [b, sq, h, dv]
//           lse fp32 [b, h, sq]
//   varlen: q [total_q, h, d] k/v [total_k, hk, d]  out [total_q, h, dv]
//           lse fp32 [h, total_q], with cu_seqlens_q / cu_seqlens_k int32 [b + 1]
// Every dimension may have any stride except the last, which must be contiguous.
// FP8: q, k, v (or only a KV cache) in e4m3 are read as x * descale (Descales below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#ifndef FLASHATTN_API  // flashattn.h defines the same macro
#define FLASHATTN_API __attribute__((visibility("default")))
#endif

namespace flashattn {

// ---------------------------------------------------------------- status ------------

enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // the call violates docs/contract.md: fix the arguments
  kUnsupported = 2,      // valid, but not available on this backend/device/build
  kCudaError = 3,        // the CUDA runtime reported an error
  kInternal = 4,         // a bug in flashattn: please report it
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

FLASHATTN_API const char* to_string(StatusCode code);
FLASHATTN_API const char* version();  // "MAJOR.MINOR.PATCH"

// ---------------------------------------------------------------- tensors -----------

// kF8E4M3: FP8 e4m3 ("fn": no infinities, NaN = 0x7F/0xFF, largest finite 448), for q, k, v
// of an inference forward and for KV caches (docs/contract.md, "FP8").
enum class DType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kF8E4M3 = 4 };
enum class DeviceType : int32_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
};

constexpr int kMaxRank = 4;

// A strided view of memory the caller owns. An optional argument is left as `Tensor{}`.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device{};
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};  // in elements

  bool present() const { return rank != 0 || data != nullptr; }
  FLASHATTN_API int64_t numel() const;
};

// A contiguous (row-major) tensor over `data`.
FLASHATTN_API Tensor make_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                   Device device = {});
// A tensor with explicit strides (in elements), e.g. a slice of a packed qkv buffer.
FLASHATTN_API Tensor make_strided_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           std::initializer_list<int64_t> stride, Device device = {});

FLASHATTN_API size_t dtype_size(DType dtype);
FLASHATTN_API const char* to_string(DType dtype);

// ---------------------------------------------------------------- options -----------

struct AttentionOptions {
  // Unset: 1/sqrt(d). Any finite value is used as given, 0 included (every score is then
  // 0, as in FlashAttention-2 with softmax_scale=0.0).
  std::optional<float> softmax_scale;
  bool causal = false;        // same as window_right = 0 (bottom-right aligned)
  int window_left = -1;       // -1: unbounded
  int window_right = -1;      // -1: unbounded
  float softcap = 0.f;        // > 0: s = softcap * tanh(s / softcap)
  Tensor alibi_slopes;        // optional fp32 [h] or [b, h]
  float dropout_p = 0.f;      // in [0, 1); training only
  uint64_t dropout_seed = 0;  // Philox key: the same (seed, offset) drops the same elements
  uint64_t dropout_offset = 0;
  // Optional, with dropout, instead of dropout_seed / dropout_offset: the address of the pair
  // {seed, offset} on the tensors' device, read when the call runs rather than when it is
  // made. A CUDA graph captures the address, so each replay uses the values written there
  // before it (as PyTorch's graph-safe random number generators do).
  const uint64_t* dropout_seed_offset = nullptr;
};

// Packed variable-length batches. Enabled when cu_seqlens_q is present.
struct VarlenLayout {
  Tensor cu_seqlens_q;  // int32 [b + 1], non-decreasing, starting at 0
  Tensor cu_seqlens_k;  // int32 [b + 1]
  Tensor seqused_k;     // optional int32 [b]: only the first seqused_k[i] keys are used
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;

  bool enabled() const { return cu_seqlens_q.present(); }
};

enum class Backend : int32_t {
  kAuto = 0,       // CUDA for device tensors, the CPU otherwise
  kReference = 1,  // docs/contract.md as code (fp64, materializes scores): tests only
  kCpu = 2,        // the CPU backend
  kCuda = 3,       // the CUDA kernels
};
FLASHATTN_API const char* to_string(Backend backend);

// The caller's allocator for a call's workspace: returns at least `bytes` on the tensors'
// device (stream-ordered on Launch::stream), or nullptr, which fails the call.
using WorkspaceAllocator = void* (*)(size_t bytes, void* context);

// Where and how a call runs.
struct Launch {
  Backend backend = Backend::kAuto;
  void* stream = nullptr;  // cudaStream_t; ignored on the CPU
  void* workspace = nullptr;  // at least workspace_size() bytes, on the tensors' device
  size_t workspace_bytes = 0;
  // Optional: asked, after validation, for a workspace when `workspace_bytes` is too small,
  // so a caller need not size it with workspace_size() first (which validates the call a
  // second time). Not called for a rejected call, nor for one that needs no workspace.
  WorkspaceAllocator allocate_workspace = nullptr;
  void* allocator_context = nullptr;
  // false: where CUDA is usable, the call asks the CUDA runtime where each pointer lives and
  // rejects one that is not where its Tensor::device says. true: the caller vouches for
  // every Tensor::device (and the workspace's), as a framework does that read them from its
  // own tensors, and the call skips those queries, which cost host time on every call.
  bool devices_trusted = false;
};

// FP8 dequantization factors (FlashAttention-3's q_descale, k_descale, v_descale): an e4m3
// operand x of batch entry b and KV head g is read as x * descale[b, g] (a query head uses
// the factor of its KV head). Each is fp32 [batch, nheads_k] (any strides; an expanded
// view with stride 0 shares one factor) or [1] (one factor for the whole tensor), on the
// tensors' device; absent: 1. Given only for e4m3 operands. With an e4m3 KV cache, the
// appended k_new/v_new rows are stored as round(x / descale[b, g]).
struct Descales {
  Tensor q, k, v;
};

// ---------------------------------------------------------------- entry points ------

struct ForwardArgs {
  Tensor q, k, v;  // fp32, fp16, bf16; or all three e4m3 (then out is bf16 or fp16)
  Tensor out;
  Tensor lse;  // optional
  VarlenLayout varlen;
  AttentionOptions options;
  Descales descale;  // e4m3 q, k, v only
};

struct BackwardArgs {
  Tensor dout, q, k, v, out, lse;  // lse as written by forward
  Tensor dq, dk, dv;               // dk/dv sum over the query heads of each KV head
  VarlenLayout varlen;
  AttentionOptions options;         // the forward's options, dropout seed/offset included
  bool deterministic = false;       // bitwise-reproducible dq/dk/dv (no atomics)
};

// Decoding with a KV cache (FlashAttention-2's flash_attn_with_kvcache).
struct KVCacheArgs {
  Tensor q;                 // [b, sq, h, d]
  // [b_cache, s_cache, hk, d], or paged [pages, page_size, hk, d]; q's dtype, or both e4m3
  // (an FP8 cache, read through descale.k / descale.v).
  Tensor k_cache, v_cache;
  Tensor cache_seqlens;     // int32 [b]: keys already in the cache
  Tensor k_new, v_new;      // optional [b, s_new, hk, d]: appended in place at cache_seqlens
  Tensor block_table;       // optional int32 [b, max_pages]: makes the cache paged
  Tensor cache_batch_idx;   // optional int32 [b]: cache row of each batch entry
  Tensor cache_leftpad;     // optional int32 [b]: cache positions before it are not keys
  Tensor rotary_cos, rotary_sin;  // optional [s_ro, rotary_dim / 2], q's dtype
  bool rotary_interleaved = false;  // GPT-J (true) or GPT-NeoX (false) pairing
  int num_splits = 0;       // 1: no split; 0: the library picks; n: n splits
  Tensor out;               // [b, sq, h, dv]
  Tensor lse;               // optional fp32 [b, h, sq]
  AttentionOptions options;  // dropout must be 0
  Descales descale;          // k and v, for an e4m3 cache (q stays fp32, fp16 or bf16)
};

FLASHATTN_API Status forward(const ForwardArgs& args, const Launch& launch = {});
FLASHATTN_API Status backward(const BackwardArgs& args, const Launch& launch = {});
FLASHATTN_API Status forward_kvcache(const KVCacheArgs& args, const Launch& launch = {});

// Bytes of workspace a call needs with this backend (0 is common).
FLASHATTN_API Status workspace_size(const ForwardArgs& args, Backend backend, size_t* bytes);
FLASHATTN_API Status workspace_size(const BackwardArgs& args, Backend backend, size_t* bytes);
FLASHATTN_API Status workspace_size(const KVCacheArgs& args, Backend backend, size_t* bytes);

// Ok when the call would run with this backend on the tensors' device; otherwise the
// reason. Shares its decision with the dispatch, so it never disagrees with what runs.
FLASHATTN_API Status supported(const ForwardArgs& args, Backend backend = Backend::kAuto);
FLASHATTN_API Status supported(const BackwardArgs& args, Backend backend = Backend::kAuto);
FLASHATTN_API Status supported(const KVCacheArgs& args, Backend backend = Backend::kAuto);

// Whether this build has CUDA and the process sees a GPU it can run on.
FLASHATTN_API bool cuda_available();

}  // namespace flashattn
