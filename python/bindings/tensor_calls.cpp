// forward, backward and forward_kvcache on framework tensor objects (tensor_objects.hpp):
// one crossing into the module per call, which reads the tensors, fills the argument
// structs, and runs the entry point, whose validation is the only one the call gets. A
// workspace, when the call needs one, comes from the framework's allocator once the
// library has sized it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "errors.hpp"
#include "tensor_objects.hpp"

namespace nb = nanobind;

namespace flashattn::python {
namespace {

double to_double(nb::handle value) {
  const double number = PyFloat_AsDouble(value.ptr());
  if (number == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return number;
}

bool to_bool(nb::handle value) {
  const int truth = PyObject_IsTrue(value.ptr());
  if (truth < 0) throw nb::python_error();
  return truth != 0;
}

// Python's int(value) & (2^64 - 1): dropout seeds and offsets are 64-bit words.
uint64_t to_word(nb::handle value) {
  const nb::object number = nb::steal(PyNumber_Long(value.ptr()));
  if (!number.is_valid()) throw nb::python_error();
  const unsigned long long word = PyLong_AsUnsignedLongLongMask(number.ptr());
  if (word == static_cast<unsigned long long>(-1) && PyErr_Occurred()) throw nb::python_error();
  return word;
}

// The fields of _calls.Options (softmax_scale None: 1/sqrt(head_dim), as the Python layer
// has always made it explicit).
AttentionOptions read_options(nb::handle options, int64_t head_dim) {
  AttentionOptions o;
  const nb::object scale = options.attr("softmax_scale");
  if (!scale.is_none()) {
    o.softmax_scale = static_cast<float>(to_double(scale));
  } else if (head_dim > 0) {
    o.softmax_scale = static_cast<float>(std::pow(static_cast<double>(head_dim), -0.5));
  }
  o.causal = to_bool(options.attr("causal"));
  const nb::object window = options.attr("window_size");
  const Py_ssize_t pair = PySequence_Size(window.ptr());
  if (pair != 2) {
    PyErr_Clear();
    raise_invalid_argument("window_size", "a pair (left, right)",
                           nb::cast<std::string>(nb::repr(window)));
  }
  o.window_left = to_int32(nb::object(window[0]), "window_size[0]");
  o.window_right = to_int32(nb::object(window[1]), "window_size[1]");
  o.softcap = static_cast<float>(to_double(options.attr("softcap")));
  o.alibi_slopes = read_tensor(options.attr("alibi_slopes"), "alibi_slopes");
  o.dropout_p = static_cast<float>(to_double(options.attr("dropout_p")));
  o.dropout_seed = to_word(options.attr("dropout_seed"));
  o.dropout_offset = to_word(options.attr("dropout_offset"));
  o.dropout_seed_offset = static_cast<const uint64_t*>(
      read_address(options.attr("dropout_seed_offset"), "dropout_seed_offset"));
  return o;
}

VarlenLayout read_varlen(nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle seqused_k,
                         nb::handle max_seqlen_q, nb::handle max_seqlen_k) {
  VarlenLayout layout;
  layout.cu_seqlens_q = read_tensor(cu_seqlens_q, "cu_seqlens_q");
  layout.cu_seqlens_k = read_tensor(cu_seqlens_k, "cu_seqlens_k");
  layout.seqused_k = read_tensor(seqused_k, "seqused_k");
  layout.max_seqlen_q = to_int32(max_seqlen_q, "max_seqlen_q");
  layout.max_seqlen_k = to_int32(max_seqlen_k, "max_seqlen_k");
  return layout;
}

int64_t head_dim(const Tensor& q) { return q.rank > 0 ? q.shape[q.rank - 1] : 0; }

// FP8 descale factors; each may be None (absent).
Descales read_descales(nb::handle q_descale, nb::handle k_descale, nb::handle v_descale) {
  Descales d;
  d.q = read_tensor(q_descale, "q_descale");
  d.k = read_tensor(k_descale, "k_descale");
  d.v = read_tensor(v_descale, "v_descale");
  return d;
}

// One call's launch: the caller's stream, and the workspace the library asks for, kept
// until the call has been queued (the framework's allocator orders its reuse after it).
// Every tensor's device was read from the framework (read_tensor), and the workspace comes
// from the framework's allocator on q's device, so the library need not ask the CUDA runtime
// where the pointers live.
class TensorLaunch {
 public:
  TensorLaunch(nb::handle like, uintptr_t stream) : like_(like) {
    launch_.devices_trusted = true;
    launch_.stream = reinterpret_cast<void*>(stream);
    launch_.allocate_workspace = &TensorLaunch::allocate;
    launch_.allocator_context = this;
  }

  template <class Args>
  void run(Status (*entry)(const Args&, const Launch&), const Args& args) {
    Status status;
    if (args.q.device.type == DeviceType::kCUDA) {
      status = entry(args, launch_);  // queues kernels and returns
    } else {
      nb::gil_scoped_release unlocked;  // the CPU backend computes, for a while
      status = entry(args, launch_);
    }
    if (error_) throw std::move(*error_);
    raise_if_error(status);
  }

 private:
  static void* allocate(size_t bytes, void* context) {
    auto* self = static_cast<TensorLaunch*>(context);
    nb::gil_scoped_acquire locked;
    try {
      void* data = nullptr;
      self->workspace_ = allocate_bytes(self->like_, bytes, &data);
      return data;
    } catch (nb::python_error& e) {
      self->error_.emplace(std::move(e));  // raised once the entry point returns
      return nullptr;
    }
  }

  nb::handle like_;
  Launch launch_;
  nb::object workspace_;
  std::optional<nb::python_error> error_;
};

void forward_tensors(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                     nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle seqused_k,
                     nb::handle max_seqlen_q, nb::handle max_seqlen_k, nb::handle options,
                     uintptr_t stream, nb::handle q_descale, nb::handle k_descale,
                     nb::handle v_descale) {
  ForwardArgs args;
  args.q = read_tensor(q, "q");
  args.k = read_tensor(k, "k");
  args.v = read_tensor(v, "v");
  args.out = read_tensor(out, "out");
  args.lse = read_tensor(lse, "lse");
  if (!cu_seqlens_q.is_none()) {
    args.varlen = read_varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k);
  }
  args.options = read_options(options, head_dim(args.q));
  args.descale = read_descales(q_descale, k_descale, v_descale);
  TensorLaunch(q, stream).run(&forward, args);
}

void backward_tensors(nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                      nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv,
                      nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, nb::handle seqused_k,
                      nb::handle max_seqlen_q, nb::handle max_seqlen_k, nb::handle options,
                      bool deterministic, uintptr_t stream) {
  BackwardArgs args;
  args.dout = read_tensor(dout, "dout");
  args.q = read_tensor(q, "q");
  args.k = read_tensor(k, "k");
  args.v = read_tensor(v, "v");
  args.out = read_tensor(out, "out");
  args.lse = read_tensor(lse, "lse");
  args.dq = read_tensor(dq, "dq");
  args.dk = read_tensor(dk, "dk");
  args.dv = read_tensor(dv, "dv");
  if (!cu_seqlens_q.is_none()) {
    args.varlen = read_varlen(cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k);
  }
  args.options = read_options(options, head_dim(args.q));
  args.deterministic = deterministic;
  TensorLaunch(q, stream).run(&backward, args);
}

void forward_kvcache_tensors(nb::handle q, nb::handle k_cache, nb::handle v_cache,
                             nb::handle cache_seqlens, nb::handle k, nb::handle v,
                             nb::handle rotary_cos, nb::handle rotary_sin,
                             nb::handle cache_batch_idx, nb::handle cache_leftpad,
                             nb::handle block_table, bool rotary_interleaved,
                             nb::handle num_splits, nb::handle out, nb::handle lse,
                             nb::handle options, uintptr_t stream, nb::handle q_descale,
                             nb::handle k_descale, nb::handle v_descale) {
  KVCacheArgs args;
  args.q = read_tensor(q, "q");
  args.k_cache = read_tensor(k_cache, "k_cache");
  args.v_cache = read_tensor(v_cache, "v_cache");
  args.cache_seqlens = read_tensor(cache_seqlens, "cache_seqlens");
  args.k_new = read_tensor(k, "k");
  args.v_new = read_tensor(v, "v");
  args.rotary_cos = read_tensor(rotary_cos, "rotary_cos");
  args.rotary_sin = read_tensor(rotary_sin, "rotary_sin");
  args.cache_batch_idx = read_tensor(cache_batch_idx, "cache_batch_idx");
  args.cache_leftpad = read_tensor(cache_leftpad, "cache_leftpad");
  args.block_table = read_tensor(block_table, "block_table");
  args.rotary_interleaved = rotary_interleaved;
  args.num_splits = to_int32(num_splits, "num_splits");
  args.out = read_tensor(out, "out");
  args.lse = read_tensor(lse, "lse");
  args.options = read_options(options, head_dim(args.q));
  args.descale = read_descales(q_descale, k_descale, v_descale);
  TensorLaunch(q, stream).run(&forward_kvcache, args);
}

}  // namespace

void bind_tensor_calls(nb::module_& m) {
  bind_tensor_objects(m);
  m.def("forward_tensors", &forward_tensors, nb::arg("q"), nb::arg("k"), nb::arg("v"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("cu_seqlens_q").none(),
        nb::arg("cu_seqlens_k").none(), nb::arg("seqused_k").none(), nb::arg("max_seqlen_q"),
        nb::arg("max_seqlen_k"), nb::arg("options"), nb::arg("stream"),
        nb::arg("q_descale").none() = nb::none(), nb::arg("k_descale").none() = nb::none(),
        nb::arg("v_descale").none() = nb::none(),
        "forward on registered framework tensors; options as flashattn._calls.Options, "
        "stream the CUDA stream (0 on the CPU), descales for e4m3 q, k, v.");
  m.def("backward_tensors", &backward_tensors, nb::arg("dout"), nb::arg("q"), nb::arg("k"),
        nb::arg("v"), nb::arg("out"), nb::arg("lse"), nb::arg("dq"), nb::arg("dk"),
        nb::arg("dv"), nb::arg("cu_seqlens_q").none(), nb::arg("cu_seqlens_k").none(),
        nb::arg("seqused_k").none(), nb::arg("max_seqlen_q"), nb::arg("max_seqlen_k"),
        nb::arg("options"), nb::arg("deterministic"), nb::arg("stream"),
        "backward on registered framework tensors.");
  m.def("forward_kvcache_tensors", &forward_kvcache_tensors, nb::arg("q"), nb::arg("k_cache"),
        nb::arg("v_cache"), nb::arg("cache_seqlens").none(), nb::arg("k").none(),
        nb::arg("v").none(), nb::arg("rotary_cos").none(), nb::arg("rotary_sin").none(),
        nb::arg("cache_batch_idx").none(), nb::arg("cache_leftpad").none(),
        nb::arg("block_table").none(), nb::arg("rotary_interleaved"), nb::arg("num_splits"),
        nb::arg("out"), nb::arg("lse").none(), nb::arg("options"), nb::arg("stream"),
        nb::arg("q_descale").none() = nb::none(), nb::arg("k_descale").none() = nb::none(),
        nb::arg("v_descale").none() = nb::none(),
        "forward_kvcache on registered framework tensors; k and v are appended to the "
        "caches in place (quantized by k_descale / v_descale into e4m3 caches).");
}

}  // namespace flashattn::python
