// The argument structs of flashattn.hpp, field for field, so the Python layer fills the
// same structs a C++ caller would (defaults included) and no positional signature grows
// with every option.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>

#include <cstdint>

#include "bindings.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

void bind_options(nb::module_& m) {
  nb::class_<AttentionOptions>(m, "AttentionOptions")
      .def(nb::init<>())
      .def_rw("softmax_scale", &AttentionOptions::softmax_scale)
      .def_rw("causal", &AttentionOptions::causal)
      .def_rw("window_left", &AttentionOptions::window_left)
      .def_rw("window_right", &AttentionOptions::window_right)
      .def_rw("softcap", &AttentionOptions::softcap)
      .def_rw("alibi_slopes", &AttentionOptions::alibi_slopes)
      .def_rw("dropout_p", &AttentionOptions::dropout_p)
      .def_rw("dropout_seed", &AttentionOptions::dropout_seed)
      .def_rw("dropout_offset", &AttentionOptions::dropout_offset);

  nb::class_<VarlenLayout>(m, "VarlenLayout")
      .def(nb::init<>())
      .def_rw("cu_seqlens_q", &VarlenLayout::cu_seqlens_q)
      .def_rw("cu_seqlens_k", &VarlenLayout::cu_seqlens_k)
      .def_rw("seqused_k", &VarlenLayout::seqused_k)
      .def_rw("max_seqlen_q", &VarlenLayout::max_seqlen_q)
      .def_rw("max_seqlen_k", &VarlenLayout::max_seqlen_k);
}

void bind_entry_args(nb::module_& m) {
  nb::class_<Descales>(m, "Descales")
      .def(nb::init<>())
      .def_rw("q", &Descales::q)
      .def_rw("k", &Descales::k)
      .def_rw("v", &Descales::v);

  nb::class_<ForwardArgs>(m, "ForwardArgs")
      .def(nb::init<>())
      .def_rw("q", &ForwardArgs::q)
      .def_rw("k", &ForwardArgs::k)
      .def_rw("v", &ForwardArgs::v)
      .def_rw("out", &ForwardArgs::out)
      .def_rw("lse", &ForwardArgs::lse)
      .def_rw("varlen", &ForwardArgs::varlen)
      .def_rw("options", &ForwardArgs::options)
      .def_rw("descale", &ForwardArgs::descale);

  nb::class_<BackwardArgs>(m, "BackwardArgs")
      .def(nb::init<>())
      .def_rw("dout", &BackwardArgs::dout)
      .def_rw("q", &BackwardArgs::q)
      .def_rw("k", &BackwardArgs::k)
      .def_rw("v", &BackwardArgs::v)
      .def_rw("out", &BackwardArgs::out)
      .def_rw("lse", &BackwardArgs::lse)
      .def_rw("dq", &BackwardArgs::dq)
      .def_rw("dk", &BackwardArgs::dk)
      .def_rw("dv", &BackwardArgs::dv)
      .def_rw("varlen", &BackwardArgs::varlen)
      .def_rw("options", &BackwardArgs::options)
      .def_rw("deterministic", &BackwardArgs::deterministic);

  nb::class_<KVCacheArgs>(m, "KVCacheArgs")
      .def(nb::init<>())
      .def_rw("q", &KVCacheArgs::q)
      .def_rw("k_cache", &KVCacheArgs::k_cache)
      .def_rw("v_cache", &KVCacheArgs::v_cache)
      .def_rw("cache_seqlens", &KVCacheArgs::cache_seqlens)
      .def_rw("k_new", &KVCacheArgs::k_new)
      .def_rw("v_new", &KVCacheArgs::v_new)
      .def_rw("block_table", &KVCacheArgs::block_table)
      .def_rw("cache_batch_idx", &KVCacheArgs::cache_batch_idx)
      .def_rw("cache_leftpad", &KVCacheArgs::cache_leftpad)
      .def_rw("rotary_cos", &KVCacheArgs::rotary_cos)
      .def_rw("rotary_sin", &KVCacheArgs::rotary_sin)
      .def_rw("rotary_interleaved", &KVCacheArgs::rotary_interleaved)
      .def_rw("num_splits", &KVCacheArgs::num_splits)
      .def_rw("out", &KVCacheArgs::out)
      .def_rw("lse", &KVCacheArgs::lse)
      .def_rw("options", &KVCacheArgs::options)
      .def_rw("descale", &KVCacheArgs::descale);
}

// Pointers cross as integers (torch's data_ptr() / cuda_stream, numpy's ctypes.data).
void bind_launch(nb::module_& m) {
  nb::enum_<Backend>(m, "Backend")
      .value("AUTO", Backend::kAuto)
      .value("REFERENCE", Backend::kReference)
      .value("CPU", Backend::kCpu)
      .value("CUDA", Backend::kCuda);

  nb::class_<Launch>(m, "Launch")
      .def(nb::init<>())
      .def_rw("backend", &Launch::backend)
      .def_prop_rw(
          "stream", [](const Launch& l) { return reinterpret_cast<uintptr_t>(l.stream); },
          [](Launch& l, uintptr_t stream) { l.stream = reinterpret_cast<void*>(stream); })
      .def_prop_rw(
          "workspace", [](const Launch& l) { return reinterpret_cast<uintptr_t>(l.workspace); },
          [](Launch& l, uintptr_t workspace) { l.workspace = reinterpret_cast<void*>(workspace); })
      .def_rw("workspace_bytes", &Launch::workspace_bytes)
      .def_rw("devices_trusted", &Launch::devices_trusted);
}

}  // namespace

void bind_arguments(nb::module_& m) {
  bind_options(m);
  bind_entry_args(m);
  bind_launch(m);
}

}  // namespace flashattn::python
