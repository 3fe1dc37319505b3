// The entry points. Each releases the GIL while the library runs (the CPU backend can
// take a while and runs its own threads) and turns a failed Status into an exception.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "errors.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

template <class Args>
void run(Status (*entry)(const Args&, const Launch&), const Args& args, const Launch& launch) {
  Status status;
  {
    nb::gil_scoped_release unlocked;
    status = entry(args, launch);
  }
  raise_if_error(status);
}

template <class Args>
size_t workspace_bytes(const Args& args, Backend backend) {
  size_t bytes = 0;
  raise_if_error(workspace_size(args, backend, &bytes));
  return bytes;
}

// None when the call would run, else the library's reason.
template <class Args>
std::optional<std::string> unsupported_reason(const Args& args, Backend backend) {
  const Status status = supported(args, backend);
  if (status.ok()) return std::nullopt;
  return status.message();
}

template <class Args>
void bind_entry(nb::module_& m, const char* name, Status (*entry)(const Args&, const Launch&),
                const char* doc) {
  m.def(
      name, [entry](const Args& args, const Launch& launch) { run(entry, args, launch); },
      nb::arg("args"), nb::arg("launch") = Launch{}, doc);
  m.def("workspace_size", &workspace_bytes<Args>, nb::arg("args"),
        nb::arg("backend") = Backend::kAuto,
        "Bytes of workspace the call needs on this backend (Launch.workspace).");
  m.def("supported", &unsupported_reason<Args>, nb::arg("args"),
        nb::arg("backend") = Backend::kAuto,
        "None when the call would run with this backend, else the reason it would not.");
}

}  // namespace

void bind_calls(nb::module_& m) {
  bind_entry<ForwardArgs>(m, "forward", &forward,
                          "Attention forward (dense, or varlen when varlen.cu_seqlens_q is set).");
  bind_entry<BackwardArgs>(m, "backward", &backward, "Gradients dq, dk, dv of the forward.");
  bind_entry<KVCacheArgs>(m, "forward_kvcache", &forward_kvcache,
                          "Decoding over a KV cache; appends k_new/v_new to the cache in place.");
  m.def("cuda_available", &cuda_available,
        "Whether this build has CUDA and the process sees a GPU it can run on.");
  m.def("version", &version);
}

}  // namespace flashattn::python
