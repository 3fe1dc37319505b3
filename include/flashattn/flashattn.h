/* flashattn C ABI: the C++ API of flashattn.hpp in plain C99, for FFI and other languages.
 *
 * The caller owns every buffer. Tensors are strided views (strides in elements, the last
 * one contiguous); an optional tensor is left zeroed (rank 0, data NULL). Start every
 * argument struct with its fa_*_args_init() so new fields get their defaults. Every call
 * returns an fa_status; on failure nothing has been written to any output and
 * fa_last_error_message() says which argument was wrong and what was expected.
 * What each call computes: docs/contract.md; layouts: flashattn.hpp. */
#ifndef FLASHATTN_FLASHATTN_H_
#define FLASHATTN_FLASHATTN_H_

#include <stddef.h>
#include <stdint.h>

#ifndef FLASHATTN_API
#if defined(__GNUC__) || defined(__clang__)
#define FLASHATTN_API __attribute__((visibility("default")))
#else
#define FLASHATTN_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Values equal those of the C++ enums. */
typedef enum fa_status {
  FA_OK = 0,
  FA_INVALID_ARGUMENT = 1, /* the call violates docs/contract.md */
  FA_UNSUPPORTED = 2,      /* valid, but not available on this backend/device/build */
  FA_CUDA_ERROR = 3,
  FA_INTERNAL = 4
} fa_status;

/* FA_F8E4M3: FP8 e4m3 (no infinities, largest finite 448) for q, k, v and KV caches. */
typedef enum fa_dtype { FA_F32 = 0, FA_F16 = 1, FA_BF16 = 2, FA_I32 = 3, FA_F8E4M3 = 4 } fa_dtype;
typedef enum fa_device_type { FA_CPU = 0, FA_CUDA = 1 } fa_device_type;
typedef enum fa_backend {
  FA_BACKEND_AUTO = 0,      /* CUDA for device tensors, the CPU otherwise */
  FA_BACKEND_REFERENCE = 1, /* the literal docs/contract.md implementation: tests only */
  FA_BACKEND_CPU = 2,
  FA_BACKEND_CUDA = 3
} fa_backend;

#define FA_MAX_RANK 4

typedef struct fa_tensor {
  void* data;
  fa_dtype dtype;
  fa_device_type device_type;
  int32_t device_index;
  int32_t rank; /* 0: absent */
  int64_t shape[FA_MAX_RANK];
  int64_t stride[FA_MAX_RANK]; /* in elements */
} fa_tensor;

typedef struct fa_options {
  float softmax_scale; /* NaN (what fa_*_args_init sets): 1/sqrt(head_dim); any finite
                          value is used as given, 0 included */
  int32_t causal;      /* nonzero: window_right = 0 */
  int32_t window_left; /* -1: unbounded */
  int32_t window_right;
  float softcap;          /* 0: off */
  fa_tensor alibi_slopes; /* optional fp32 [h] or [b, h] */
  float dropout_p;        /* in [0, 1) */
  uint64_t dropout_seed;
  uint64_t dropout_offset;
} fa_options;

typedef struct fa_varlen {
  fa_tensor cu_seqlens_q; /* present: packed varlen layout */
  fa_tensor cu_seqlens_k;
  fa_tensor seqused_k;
  int32_t max_seqlen_q;
  int32_t max_seqlen_k;
} fa_varlen;

/* The caller's allocator for a call's workspace: returns at least `bytes` on the tensors'
 * device (stream-ordered on fa_launch.stream), or NULL, which fails the call. */
typedef void* (*fa_workspace_allocator)(size_t bytes, void* context);

typedef struct fa_launch {
  fa_backend backend;
  void* stream; /* cudaStream_t */
  void* workspace;
  size_t workspace_bytes;
  /* Optional: asked, after validation, for a workspace when workspace_bytes is too small,
     so the caller need not size it with fa_workspace_size_* first (which validates the call
     a second time). Not called for a rejected call, nor for one that needs no workspace. */
  fa_workspace_allocator allocate_workspace;
  void* allocator_context;
  /* 0: where CUDA is usable, the call asks the CUDA runtime where each pointer lives and
     rejects one that is not where its fa_tensor says. Nonzero: the caller vouches for every
     tensor's device_type / device_index (and the workspace's), as a framework does that read
     them from its own tensors, and the call skips those queries (host time on every call). */
  int32_t devices_trusted;
} fa_launch;

/* FP8 dequantization factors: an e4m3 operand x of batch entry b and KV head g is read as
 * x * descale[b, g]; each fp32 [batch, nheads_k] or [1], optional (absent: 1), given only
 * for e4m3 operands. New rows appended to an e4m3 cache are stored as x / descale[b, g]. */
typedef struct fa_descales {
  fa_tensor q, k, v;
} fa_descales;

typedef struct fa_forward_args {
  fa_tensor q, k, v, out; /* q, k, v all e4m3: out bf16 or fp16 */
  fa_tensor lse;          /* optional */
  fa_varlen varlen;
  fa_options options;
  fa_descales descale; /* e4m3 q, k, v only */
  /* optional, with dropout: {seed, offset} on the tensors' device, read when the call runs
     (AttentionOptions::dropout_seed_offset); NULL: options.dropout_seed / dropout_offset */
  const uint64_t* dropout_seed_offset;
} fa_forward_args;

typedef struct fa_backward_args {
  fa_tensor dout, q, k, v, out, lse;
  fa_tensor dq, dk, dv;
  fa_varlen varlen;
  fa_options options;
  int32_t deterministic;
  const uint64_t* dropout_seed_offset; /* as in fa_forward_args: the forward's pair */
} fa_backward_args;

typedef struct fa_kvcache_args {
  fa_tensor q;
  fa_tensor k_cache, v_cache; /* q's dtype, or both FA_F8E4M3 */
  fa_tensor cache_seqlens;
  fa_tensor k_new, v_new;
  fa_tensor block_table;
  fa_tensor cache_batch_idx;
  fa_tensor cache_leftpad;
  fa_tensor rotary_cos, rotary_sin;
  int32_t rotary_interleaved;
  int32_t num_splits; /* 0: the library picks */
  fa_tensor out;
  fa_tensor lse; /* optional */
  fa_options options;
  fa_descales descale; /* k and v of an e4m3 cache (q stays fp32, fp16 or bf16) */
} fa_kvcache_args;

/* Defaults: every tensor absent, windows -1, softmax_scale NaN (1/sqrt(head_dim)),
 * everything else 0. */
FLASHATTN_API void fa_forward_args_init(fa_forward_args* args);
FLASHATTN_API void fa_backward_args_init(fa_backward_args* args);
FLASHATTN_API void fa_kvcache_args_init(fa_kvcache_args* args);
FLASHATTN_API void fa_launch_init(fa_launch* launch); /* FA_BACKEND_AUTO, no stream */

/* A contiguous (row-major) tensor of `rank` dimensions over `data`, in host memory
 * (set device_type and device_index afterwards for GPU memory). */
FLASHATTN_API fa_tensor fa_make_tensor(void* data, fa_dtype dtype, int32_t rank,
                                       const int64_t* shape);

/* `launch` may be NULL: FA_BACKEND_AUTO on the default stream, no workspace. */
FLASHATTN_API fa_status fa_forward(const fa_forward_args* args, const fa_launch* launch);
FLASHATTN_API fa_status fa_backward(const fa_backward_args* args, const fa_launch* launch);
FLASHATTN_API fa_status fa_forward_kvcache(const fa_kvcache_args* args, const fa_launch* launch);

FLASHATTN_API fa_status fa_workspace_size_forward(const fa_forward_args* args, fa_backend backend,
                                                  size_t* bytes);
FLASHATTN_API fa_status fa_workspace_size_backward(const fa_backward_args* args, fa_backend backend,
                                                   size_t* bytes);
FLASHATTN_API fa_status fa_workspace_size_kvcache(const fa_kvcache_args* args, fa_backend backend,
                                                  size_t* bytes);

/* FA_OK when the call would run with `backend`; otherwise why not. */
FLASHATTN_API fa_status fa_supported_forward(const fa_forward_args* args, fa_backend backend);
FLASHATTN_API fa_status fa_supported_backward(const fa_backward_args* args, fa_backend backend);
FLASHATTN_API fa_status fa_supported_kvcache(const fa_kvcache_args* args, fa_backend backend);

FLASHATTN_API const char* fa_version(void);
FLASHATTN_API int fa_cuda_available(void);
/* The message of the most recent failed call on this thread ("" if none failed yet);
 * valid until the next failed call on this thread. */
FLASHATTN_API const char* fa_last_error_message(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHATTN_FLASHATTN_H_ */
