// flashattn._C: the C++ API over raw pointers, shapes, strides and a CUDA stream.
#include "bindings.hpp"
#include "errors.hpp"

NB_MODULE(_C, m) {
  m.doc() =
      "flashattn's C++ API over raw pointers: build Tensor views and *Args structs, then call "
      "forward / backward / forward_kvcache. The flashattn package wraps this for numpy and "
      "torch.";
  flashattn::python::bind_errors(m);
  flashattn::python::bind_tensor(m);
  flashattn::python::bind_arguments(m);
  flashattn::python::bind_calls(m);
  flashattn::python::bind_tensor_calls(m);
  flashattn::python::bind_library_table(m);
}
