// The flashattn library as the extension sees it: the C ABI entry points of flashattn._C
// (through the table _C hands over, library_table.h), a launch on the caller's stream with a
// workspace from torch's allocator, and how a failed call is raised.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <exception>
#include <string>

#include "library_table.h"

namespace flashattn::torch_ext {

// Set once, by the op set_library_table, before any call (flashattn._torch_ext does it
// right after loading the extension).
inline const flashattn_library_table* library = nullptr;

// How a failure reaches Python. The forward is called by flashattn._torch_ext, which reads
// the tag back: a status code becomes the library's exception class with the message as
// it is, and kFallback (inputs the extension does not take, so nothing has run) sends the
// call down the Python path, which then raises exactly what it always raised. The backward
// runs inside the autograd engine, where no Python code sees the error first: it raises
// the builtin class the library's class derives from (InvalidArgumentError is a ValueError,
// UnsupportedError a NotImplementedError) with the library's message.
constexpr int kFallback = -1;

[[noreturn]] inline void fail_forward(int code, const std::string& message) {
  throw c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                   "[flashattn " + std::to_string(code) + "] " + message);
}

[[noreturn]] inline void fail_backward(int code, const std::string& message) {
  const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  if (code == FA_INVALID_ARGUMENT) throw c10::ValueError(where, message);
  if (code == FA_UNSUPPORTED) throw c10::NotImplementedError(where, message);
  throw c10::Error(where, message);
}

// One call's launch: the current stream of `like`'s device (none for CPU tensors) and the
// workspace the library asks for once it has validated and sized the call, from torch's
// allocator (which orders its reuse after the work queued on that stream), kept until the
// call has been queued. Every fa_tensor's device is torch's own (describe), so the library
// need not ask the CUDA runtime where the pointers live.
class TensorLaunch {
 public:
  explicit TensorLaunch(const at::Tensor& like) : like_(like) {
    library->launch_init(&launch_);
    launch_.devices_trusted = 1;
    if (like.is_cuda()) {
      launch_.stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                           ->getStream(like.device())
                           .native_handle();
    }
    launch_.allocate_workspace = &TensorLaunch::allocate;
    launch_.allocator_context = this;
  }

  // The entry point's status; an exception of the allocator is raised here instead.
  template <class Args>
  fa_status run(fa_status (*entry)(const Args*, const fa_launch*), const Args& args) {
    const fa_status status = entry(&args, &launch_);
    if (error_) std::rethrow_exception(error_);
    return status;
  }

 private:
  static void* allocate(size_t bytes, void* context) noexcept {
    auto* self = static_cast<TensorLaunch*>(context);
    try {
      self->workspace_ = at::empty({static_cast<int64_t>(bytes)},
                                   self->like_.options().dtype(at::kByte));
      return self->workspace_.data_ptr();
    } catch (...) {
      self->error_ = std::current_exception();  // the library fails the call on nullptr
      return nullptr;
    }
  }

  const at::Tensor& like_;
  fa_launch launch_;
  at::Tensor workspace_;
  std::exception_ptr error_;
};

}  // namespace flashattn::torch_ext
