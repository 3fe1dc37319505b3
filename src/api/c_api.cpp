// The C ABI (flashattn.h) over the C++ API: field-by-field conversions, a thread-local
// message of the last failure, and no exception ever crossing into C.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"
#include "flashattn/flashattn.hpp"

namespace {

using namespace flashattn;

static_assert(FA_MAX_RANK == kMaxRank, "fa_tensor and Tensor must hold the same rank");
static_assert(FA_INTERNAL == static_cast<int>(StatusCode::kInternal), "status codes must match");
static_assert(FA_I32 == static_cast<int>(DType::kI32), "dtypes must match");
static_assert(FA_F8E4M3 == static_cast<int>(DType::kF8E4M3), "dtypes must match");
static_assert(FA_CUDA == static_cast<int>(DeviceType::kCUDA), "device types must match");
static_assert(FA_BACKEND_CUDA == static_cast<int>(Backend::kCuda), "backends must match");

thread_local std::string last_error;

// The integer a C enum field holds. A C caller may store any value there (a wrong one
// included, which validation must report), but in C++ reading a value outside the enum's
// range through the enum type is undefined, so the field's bytes are read as an integer.
template <class CEnum>
int32_t enum_value(const CEnum& field) {
  static_assert(sizeof(CEnum) == sizeof(int32_t), "C enums are int-sized here");
  int32_t value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

Backend backend_of(const fa_backend& backend) {
  return static_cast<Backend>(enum_value(backend));
}

Tensor to_cpp(const fa_tensor& t) {
  Tensor out;
  out.data = t.data;
  // DType and DeviceType have int32_t as their underlying type: every value is valid.
  out.dtype = static_cast<DType>(enum_value(t.dtype));
  out.device = Device{static_cast<DeviceType>(enum_value(t.device_type)), t.device_index};
  out.rank = t.rank;  // kept as given: validation reports a rank outside 1..4
  for (int d = 0; d < kMaxRank; ++d) {
    out.shape[d] = t.shape[d];
    out.stride[d] = t.stride[d];
  }
  return out;
}

AttentionOptions to_cpp(const fa_options& o) {
  AttentionOptions out;
  if (!std::isnan(o.softmax_scale)) out.softmax_scale = o.softmax_scale;
  out.causal = o.causal != 0;
  out.window_left = o.window_left;
  out.window_right = o.window_right;
  out.softcap = o.softcap;
  out.alibi_slopes = to_cpp(o.alibi_slopes);
  out.dropout_p = o.dropout_p;
  out.dropout_seed = o.dropout_seed;
  out.dropout_offset = o.dropout_offset;
  return out;
}

VarlenLayout to_cpp(const fa_varlen& v) {
  VarlenLayout out;
  out.cu_seqlens_q = to_cpp(v.cu_seqlens_q);
  out.cu_seqlens_k = to_cpp(v.cu_seqlens_k);
  out.seqused_k = to_cpp(v.seqused_k);
  out.max_seqlen_q = v.max_seqlen_q;
  out.max_seqlen_k = v.max_seqlen_k;
  return out;
}

Launch to_cpp(const fa_launch* l) {
  Launch out;
  if (l == nullptr) return out;
  out.backend = backend_of(l->backend);
  out.stream = l->stream;
  out.workspace = l->workspace;
  out.workspace_bytes = l->workspace_bytes;
  out.allocate_workspace = l->allocate_workspace;
  out.allocator_context = l->allocator_context;
  out.devices_trusted = l->devices_trusted != 0;
  return out;
}

Descales to_cpp(const fa_descales& d) {
  Descales out;
  out.q = to_cpp(d.q);
  out.k = to_cpp(d.k);
  out.v = to_cpp(d.v);
  return out;
}

ForwardArgs to_cpp(const fa_forward_args& a) {
  ForwardArgs out;
  out.q = to_cpp(a.q);
  out.k = to_cpp(a.k);
  out.v = to_cpp(a.v);
  out.out = to_cpp(a.out);
  out.lse = to_cpp(a.lse);
  out.varlen = to_cpp(a.varlen);
  out.options = to_cpp(a.options);
  out.options.dropout_seed_offset = a.dropout_seed_offset;
  out.descale = to_cpp(a.descale);
  return out;
}

BackwardArgs to_cpp(const fa_backward_args& a) {
  BackwardArgs out;
  out.dout = to_cpp(a.dout);
  out.q = to_cpp(a.q);
  out.k = to_cpp(a.k);
  out.v = to_cpp(a.v);
  out.out = to_cpp(a.out);
  out.lse = to_cpp(a.lse);
  out.dq = to_cpp(a.dq);
  out.dk = to_cpp(a.dk);
  out.dv = to_cpp(a.dv);
  out.varlen = to_cpp(a.varlen);
  out.options = to_cpp(a.options);
  out.options.dropout_seed_offset = a.dropout_seed_offset;
  out.deterministic = a.deterministic != 0;
  return out;
}

KVCacheArgs to_cpp(const fa_kvcache_args& a) {
  KVCacheArgs out;
  out.q = to_cpp(a.q);
  out.k_cache = to_cpp(a.k_cache);
  out.v_cache = to_cpp(a.v_cache);
  out.cache_seqlens = to_cpp(a.cache_seqlens);
  out.k_new = to_cpp(a.k_new);
  out.v_new = to_cpp(a.v_new);
  out.block_table = to_cpp(a.block_table);
  out.cache_batch_idx = to_cpp(a.cache_batch_idx);
  out.cache_leftpad = to_cpp(a.cache_leftpad);
  out.rotary_cos = to_cpp(a.rotary_cos);
  out.rotary_sin = to_cpp(a.rotary_sin);
  out.rotary_interleaved = a.rotary_interleaved != 0;
  out.num_splits = a.num_splits;
  out.out = to_cpp(a.out);
  out.lse = to_cpp(a.lse);
  out.options = to_cpp(a.options);
  out.descale = to_cpp(a.descale);
  return out;
}

fa_status report(const Status& status) {
  if (!status.ok()) last_error = status.message();
  return static_cast<fa_status>(status.code());
}

// Runs `call` (returning a Status) with the pointer arguments checked first.
template <class Call>
fa_status guarded(std::initializer_list<std::pair<const void*, const char*>> pointers, Call call) {
  try {
    for (const auto& pointer : pointers) {
      if (pointer.first == nullptr) {
        return report(
            Status(StatusCode::kInvalidArgument,
                   std::string(pointer.second) + ": expected a non-null pointer, got NULL"));
      }
    }
    return report(call());
  } catch (...) {
    last_error = "flashattn: unexpected exception in the C API";
    return FA_INTERNAL;
  }
}

fa_options default_options() {
  fa_options o;
  std::memset(&o, 0, sizeof o);
  o.softmax_scale = NAN;
  o.window_left = -1;
  o.window_right = -1;
  return o;
}

}  // namespace

extern "C" {

void fa_forward_args_init(fa_forward_args* args) {
  if (args == nullptr) return;
  std::memset(args, 0, sizeof *args);
  args->options = default_options();
}

void fa_backward_args_init(fa_backward_args* args) {
  if (args == nullptr) return;
  std::memset(args, 0, sizeof *args);
  args->options = default_options();
}

void fa_kvcache_args_init(fa_kvcache_args* args) {
  if (args == nullptr) return;
  std::memset(args, 0, sizeof *args);
  args->options = default_options();
}

void fa_launch_init(fa_launch* launch) {
  if (launch != nullptr) std::memset(launch, 0, sizeof *launch);
}

fa_tensor fa_make_tensor(void* data, fa_dtype dtype, int32_t rank, const int64_t* shape) {
  fa_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.device_type = FA_CPU;
  t.rank = rank;
  if (shape == nullptr || rank < 0 || rank > FA_MAX_RANK) return t;  // validation reports it
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.stride[d] = stride;
    stride *= shape[d];
  }
  return t;
}

fa_status fa_forward(const fa_forward_args* args, const fa_launch* launch) {
  return guarded({{args, "args"}}, [&] { return forward(to_cpp(*args), to_cpp(launch)); });
}

fa_status fa_backward(const fa_backward_args* args, const fa_launch* launch) {
  return guarded({{args, "args"}}, [&] { return backward(to_cpp(*args), to_cpp(launch)); });
}

fa_status fa_forward_kvcache(const fa_kvcache_args* args, const fa_launch* launch) {
  return guarded({{args, "args"}}, [&] { return forward_kvcache(to_cpp(*args), to_cpp(launch)); });
}

fa_status fa_workspace_size_forward(const fa_forward_args* args, fa_backend backend,
                                    size_t* bytes) {
  return guarded({{args, "args"}, {bytes, "bytes"}}, [&] {
    return workspace_size(to_cpp(*args), backend_of(backend), bytes);
  });
}

fa_status fa_workspace_size_backward(const fa_backward_args* args, fa_backend backend,
                                     size_t* bytes) {
  return guarded({{args, "args"}, {bytes, "bytes"}}, [&] {
    return workspace_size(to_cpp(*args), backend_of(backend), bytes);
  });
}

fa_status fa_workspace_size_kvcache(const fa_kvcache_args* args, fa_backend backend,
                                    size_t* bytes) {
  return guarded({{args, "args"}, {bytes, "bytes"}}, [&] {
    return workspace_size(to_cpp(*args), backend_of(backend), bytes);
  });
}

fa_status fa_supported_forward(const fa_forward_args* args, fa_backend backend) {
  return guarded({{args, "args"}},
                 [&] { return supported(to_cpp(*args), backend_of(backend)); });
}

fa_status fa_supported_backward(const fa_backward_args* args, fa_backend backend) {
  return guarded({{args, "args"}},
                 [&] { return supported(to_cpp(*args), backend_of(backend)); });
}

fa_status fa_supported_kvcache(const fa_kvcache_args* args, fa_backend backend) {
  return guarded({{args, "args"}},
                 [&] { return supported(to_cpp(*args), backend_of(backend)); });
}

const char* fa_version(void) { return version(); }

int fa_cuda_available(void) { return cuda_available() ? 1 : 0; }

const char* fa_last_error_message(void) { return last_error.c_str(); }

}  // extern "C"
