// The eager attention of torch tensors with autograd in C++: what _torch_eager._Attention
// (a Python torch.autograd.Function) and _torch_ops.forward_with_options /
// backward_with_options do, call for call the same library calls with the same arguments,
// so the results are bitwise the Python path's.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "library.hpp"
#include "tensors.hpp"

namespace flashattn::torch_ext {

// Everything of a call but q, k and v (_torch_eager._Call and _calls.Options): kept by the
// autograd node for the backward. Scalars as the op received them; the library's types are
// checked when the forward fills its arguments.
struct Call : torch::CustomClassHolder {
  std::optional<at::Tensor> cu_seqlens_q, cu_seqlens_k, seqused_k, alibi_slopes;
  int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  double dropout_p = 0;
  std::optional<double> softmax_scale;  // none: 1/sqrt(head_dim)
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  bool deterministic = false;
  at::Tensor rng_state;  // with dropout: int64 [2] (seed, offset) drawn by the forward
  at::Tensor lse;        // the forward's, when autograd runs it (not an output of the node)
};

inline bool fits_int32(int64_t value) { return value >= INT32_MIN && value <= INT32_MAX; }

// The binding's read_options and read_varlen (tensor_calls.cpp). Returns "" or why the
// extension does not take the call (the Python path then reports it in its own words).
inline std::string fill(const Call& call, int64_t head_dim, fa_options* o, fa_varlen* varlen) {
  if (call.softmax_scale) {
    o->softmax_scale = static_cast<float>(*call.softmax_scale);
  } else if (head_dim > 0) {
    o->softmax_scale = static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));
  }
  o->causal = call.causal;
  if (!fits_int32(call.window_left) || !fits_int32(call.window_right)) return "window_size";
  o->window_left = static_cast<int32_t>(call.window_left);
  o->window_right = static_cast<int32_t>(call.window_right);
  o->softcap = static_cast<float>(call.softcap);
  std::string why = describe(call.alibi_slopes, "alibi_slopes", &o->alibi_slopes);
  if (!why.empty()) return why;
  o->dropout_p = static_cast<float>(call.dropout_p);
  if (!call.cu_seqlens_q) return "";
  if (!fits_int32(call.max_seqlen_q) || !fits_int32(call.max_seqlen_k)) return "max_seqlen";
  varlen->max_seqlen_q = static_cast<int32_t>(call.max_seqlen_q);
  varlen->max_seqlen_k = static_cast<int32_t>(call.max_seqlen_k);
  why = describe(call.cu_seqlens_q, "cu_seqlens_q", &varlen->cu_seqlens_q);
  if (why.empty()) why = describe(call.cu_seqlens_k, "cu_seqlens_k", &varlen->cu_seqlens_k);
  if (why.empty()) why = describe(call.seqused_k, "seqused_k", &varlen->seqused_k);
  return why;
}

inline const uint64_t* seed_offset(const Call& call) {
  return call.dropout_p > 0 ? static_cast<const uint64_t*>(call.rng_state.const_data_ptr())
                            : nullptr;
}

// forward_with_options: (out, lse); lse undefined without `with_lse`. With dropout, draws
// call.rng_state as _torch_rng.draw_seed_offset does. Inputs the extension does not take
// fail with kFallback before anything is drawn or run.
inline std::tuple<at::Tensor, at::Tensor> run_forward(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, Call& call,
                                                      bool with_lse) {
  if (library == nullptr) fail_forward(kFallback, "no library table");
  const bool packed = call.cu_seqlens_q.has_value();
  const int64_t rank = packed ? 3 : 4;
  // _calls.expect_attention_ranks, whose message the Python path gives.
  if (q.dim() != rank || k.dim() != rank || v.dim() != rank) fail_forward(kFallback, "rank");
  fa_forward_args args;
  library->forward_args_init(&args);
  std::string why = describe(q, "q", &args.q);
  if (why.empty()) why = describe(k, "k", &args.k);
  if (why.empty()) why = describe(v, "v", &args.v);
  if (why.empty()) why = fill(call, q.size(-1), &args.options, &args.varlen);
  if (!why.empty()) fail_forward(kFallback, why);
  std::optional<TensorLaunch> launch;
  try {
    launch.emplace(q);
  } catch (const std::exception& e) {  // no stream for this device
    fail_forward(kFallback, e.what());
  }

  std::vector<int64_t> out_shape(q.sizes().begin(), q.sizes().end());
  out_shape.back() = v.size(-1);
  at::Tensor out = at::empty(out_shape, q.options());
  at::Tensor lse;
  if (with_lse) {
    const auto lse_shape = packed ? std::vector<int64_t>{q.size(1), q.size(0)}
                                  : std::vector<int64_t>{q.size(0), q.size(2), q.size(1)};
    lse = at::empty(lse_shape, q.options().dtype(at::kFloat));
  }
  describe(out, "out", &args.out, /*writable=*/true);
  describe(lse, "lse", &args.lse, /*writable=*/true);
  if (call.dropout_p > 0) {
    call.rng_state = at::empty({2}, q.options().dtype(at::kLong)).random_();
    args.dropout_seed_offset = seed_offset(call);
  }
  const fa_status status = launch->run(library->forward, args);
  if (status != FA_OK) fail_forward(status, library->last_error_message());
  return {out, lse};
}

// backward_with_options: (dq, dk, dv), contiguous in the shapes of q, k and v.
inline std::vector<at::Tensor> run_backward(at::Tensor dout, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& out, const at::Tensor& lse,
                                            const Call& call) {
  // TorchTensors.readable: the library reads rows with a contiguous last dimension.
  if (dout.dim() && dout.stride(-1) != 1 && dout.size(-1) != 1) dout = dout.contiguous();
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  fa_backward_args args;
  library->backward_args_init(&args);
  const std::pair<const at::Tensor*, const char*> inputs[] = {
      {&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}};
  fa_tensor* fields[] = {&args.dout, &args.q, &args.k, &args.v, &args.out, &args.lse};
  for (int i = 0; i < 6; ++i) {
    const std::string why = describe(*inputs[i].first, inputs[i].second, fields[i]);
    if (!why.empty()) fail_backward(FA_INVALID_ARGUMENT, why);
  }
  describe(dq, "dq", &args.dq, /*writable=*/true);
  describe(dk, "dk", &args.dk, /*writable=*/true);
  describe(dv, "dv", &args.dv, /*writable=*/true);
  const std::string why = fill(call, q.size(-1), &args.options, &args.varlen);
  if (!why.empty()) fail_backward(FA_INVALID_ARGUMENT, why);  // the forward took them
  args.deterministic = call.deterministic;
  args.dropout_seed_offset = seed_offset(call);
  TensorLaunch launch(q);
  const fa_status status = launch.run(library->backward, args);
  if (status != FA_OK) fail_backward(status, library->last_error_message());
  return {dq, dk, dv};
}

// A Call in the autograd context as plain values, which torch._dynamo's compiled autograd
// can read (it cannot read a capsule): its tensors saved beside the node's operands
// (undefined where absent; saved tensors are also checked for in-place changes), its numbers
// one list in saved_data (every integer here is exact in a double). One entry rather than one
// per field: each entry of saved_data is a string-keyed insertion and an allocation per call.
using SavedData = decltype(torch::autograd::AutogradContext::saved_data);
constexpr const char* kSavedScalars = "call";
constexpr int kSavedOperands = 5;  // q, k, v, out, lse; then the Call's tensors

inline void save(torch::autograd::AutogradContext* ctx, const Call& call, const at::Tensor& q,
                 const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                 const at::Tensor& lse) {
  auto tensor = [](const std::optional<at::Tensor>& t) { return t ? *t : at::Tensor(); };
  ctx->save_for_backward({q, k, v, out, lse, tensor(call.cu_seqlens_q), tensor(call.cu_seqlens_k),
                          tensor(call.seqused_k), tensor(call.alibi_slopes), call.rng_state});
  const double no_scale = std::numeric_limits<double>::quiet_NaN();
  ctx->saved_data[kSavedScalars] = std::vector<double>{
      call.dropout_p,
      call.softcap,
      call.softmax_scale ? *call.softmax_scale : no_scale,
      static_cast<double>(call.max_seqlen_q),
      static_cast<double>(call.max_seqlen_k),
      static_cast<double>(call.window_left),
      static_cast<double>(call.window_right),
      call.causal ? 1.0 : 0.0,
      call.deterministic ? 1.0 : 0.0};
}

// The Call save() kept; `saved`: the node's saved tensors, in save()'s order.
inline Call restore(const std::vector<at::Tensor>& saved, SavedData& data) {
  auto optional = [&](int i) {
    const at::Tensor& t = saved[kSavedOperands + i];
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  Call call;
  call.cu_seqlens_q = optional(0);
  call.cu_seqlens_k = optional(1);
  call.seqused_k = optional(2);
  call.alibi_slopes = optional(3);
  call.rng_state = saved[kSavedOperands + 4];
  const auto scalars = data[kSavedScalars].toDoubleVector();
  call.dropout_p = scalars[0];
  call.softcap = scalars[1];
  if (!std::isnan(scalars[2])) call.softmax_scale = scalars[2];
  call.max_seqlen_q = static_cast<int64_t>(scalars[3]);
  call.max_seqlen_k = static_cast<int64_t>(scalars[4]);
  call.window_left = static_cast<int64_t>(scalars[5]);
  call.window_right = static_cast<int64_t>(scalars[6]);
  call.causal = scalars[7] != 0.0;
  call.deterministic = scalars[8] != 0.0;
  return call;
}

// _torch_eager._Attention in C++: the node the autograd engine runs without Python.
struct AttentionFunction : torch::autograd::Function<AttentionFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v,
                                                const c10::intrusive_ptr<Call>& call) {
    auto [out, lse] = run_forward(q, k, v, *call, /*with_lse=*/true);
    save(ctx, *call, q, k, v, out, lse);
    // lse and rng_state are not outputs of the node but reach the caller through `call`:
    // made without gradient mode, they are the non-differentiable tensors the Python path
    // marks as such, the node gets no gradient for them (no zero tensors made on every
    // backward), and compiled autograd, which cannot take marked outputs, takes the node.
    call->lse = lse;
    ctx->set_materialize_grads(false);
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& dout = grads[0];
    if (!dout.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const Call call = restore(saved, ctx->saved_data);
    auto dqkv = run_backward(dout, saved[0], saved[1], saved[2], saved[3], saved[4], call);
    dqkv.emplace_back();  // `call` has no gradient
    return dqkv;
  }
};

}  // namespace flashattn::torch_ext
