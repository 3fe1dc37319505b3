// The torch extension's operators, namespace flashattn_cxx, for flashattn._torch_ext (not a
// public API):
//   set_library_table(address): the C ABI entry points of flashattn._C (library_table.h),
//     handed over once after loading;
//   attention(...): the eager forward with autograd (attention.hpp): (out, lse, rng_state),
//     lse None without with_lse (when no gradient is needed), rng_state None without dropout.
// These ops are only ever called eagerly on plain tensors. Tracing (torch.compile, fake
// tensors, opcheck) and CUDA graphs keep the torch.library ops of _torch_ops.py; this op
// has no fake implementation and is not meant to be traced. The one kernel is registered for
// every dispatch key (CompositeImplicitAutograd): autograd is the Function's own.
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "attention.hpp"

namespace flashattn::torch_ext {
namespace {

void set_library_table(int64_t address) {
  const auto* table = reinterpret_cast<const flashattn_library_table*>(address);
  TORCH_CHECK(table != nullptr && table->size == sizeof(flashattn_library_table) &&
                  table->version == FLASHATTN_LIBRARY_TABLE_VERSION,
              "flashattn_cxx: flashattn._C and this extension come from different builds");
  library = table;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_k,
    const std::optional<at::Tensor>& seqused_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
    double dropout_p, std::optional<double> softmax_scale, bool causal, int64_t window_left,
    int64_t window_right, double softcap, const std::optional<at::Tensor>& alibi_slopes,
    bool deterministic, bool with_lse) {
  auto call = c10::make_intrusive<Call>();
  call->cu_seqlens_q = cu_seqlens_q;
  call->cu_seqlens_k = cu_seqlens_k;
  call->seqused_k = seqused_k;
  call->alibi_slopes = alibi_slopes;
  call->max_seqlen_q = max_seqlen_q;
  call->max_seqlen_k = max_seqlen_k;
  call->dropout_p = dropout_p;
  call->softmax_scale = softmax_scale;
  call->causal = causal;
  call->window_left = window_left;
  call->window_right = window_right;
  call->softcap = softcap;
  call->deterministic = deterministic;
  if (at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) {
    const auto outputs = AttentionFunction::apply(q, k, v, call);
    return {outputs[0], call->lse, call->rng_state};
  }
  auto [out, lse] = run_forward(q, k, v, *call, with_lse);
  return {out, lse, call->rng_state};
}

}  // namespace
}  // namespace flashattn::torch_ext

TORCH_LIBRARY(flashattn_cxx, m) {
  m.def("set_library_table(int address) -> ()", &flashattn::torch_ext::set_library_table);
  m.def("attention(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, "
        "Tensor? seqused_k, int max_seqlen_q, int max_seqlen_k, float dropout_p, "
        "float? softmax_scale, bool causal, int window_left, int window_right, float softcap, "
        "Tensor? alibi_slopes, bool deterministic, bool with_lse) -> (Tensor, Tensor, Tensor)",
        &flashattn::torch_ext::attention);
}
