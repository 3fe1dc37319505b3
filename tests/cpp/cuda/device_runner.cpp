#include "device_runner.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/checks.hpp"  // FA_RETURN_IF_ERROR
#include "cuda/check.hpp"  // FA_CUDA_RETURN_IF_ERROR
#include "tensor_span.hpp"

namespace fa_cuda_test {
namespace {

using flashattn::Backend;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::Tensor;

// The kernels pick their path from 16-byte alignment, and host allocations are 16-byte
// aligned: a device copy at the same address modulo 16 takes the path the view asks for.
constexpr uintptr_t kAlignment = 16;
constexpr int kNanByte = 0xFF;  // all-ones is a NaN in fp32, fp16 and bf16

// cudaMalloc'd memory, freed when it goes out of scope.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  DeviceBytes(DeviceBytes&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  DeviceBytes& operator=(DeviceBytes&&) = delete;
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }

  Status allocate(size_t bytes) {
    FA_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1)));
    return Status::Ok();
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// A stream of our own, not the legacy default stream: every copy and the call are ordered
// on it, so the test sees what a caller with its own stream sees.
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status create() {
    FA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    return Status::Ok();
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

enum class Role {
  kInput,   // copied to the device
  kOutput,  // copied to the device with its elements poisoned, then copied back
  kInOut,   // copied to the device as is, then copied back (KV caches updated in place)
};

struct RoledTensor {
  Tensor* tensor;
  Role role;
};

// Device copies of the host tensors of one call. The device memory and the staging
// buffers live until the mirror is destroyed, which waits for the stream first (an early
// error return may leave copies in flight).
class DeviceMirror {
 public:
  DeviceMirror(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror() { cudaStreamSynchronize(stream_); }

  // Points `t` at its device copy. A tensor without data (absent, or empty and null) only
  // changes its declared device, exactly as its host version declares none.
  Status add(Tensor* t, Role role) {
    if (!t->present()) return Status::Ok();
    t->device = flashattn::Device{flashattn::DeviceType::kCUDA, device_};
    if (t->data == nullptr) return Status::Ok();
    const ByteSpan span = byte_span(*t);
    Copy copy;
    copy.host = static_cast<uint8_t*>(t->data) + span.begin;
    copy.bytes = static_cast<size_t>(span.bytes());
    copy.copy_back = role != Role::kInput;
    const uintptr_t misalignment = reinterpret_cast<uintptr_t>(copy.host) % kAlignment;
    FA_RETURN_IF_ERROR(copy.memory.allocate(misalignment + copy.bytes));
    copy.device = copy.memory.get() + misalignment;
    copy.staging.assign(copy.host, copy.host + copy.bytes);
    if (role == Role::kOutput) poison_elements(*t, span, &copy.staging);
    if (copy.bytes > 0) {
      FA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copy.device, copy.staging.data(), copy.bytes,
                                              cudaMemcpyHostToDevice, stream_));
    }
    t->data = copy.device - span.begin;
    copies_.push_back(std::move(copy));
    return Status::Ok();
  }

  // Copies every output span back over its host memory and waits for it.
  Status copy_back() {
    for (const Copy& copy : copies_) {
      if (!copy.copy_back || copy.bytes == 0) continue;
      FA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(copy.host, copy.device, copy.bytes,
                                              cudaMemcpyDeviceToHost, stream_));
    }
    FA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }

 private:
  struct Copy {
    uint8_t* host = nullptr;    // first byte of the host span
    uint8_t* device = nullptr;  // first byte of its device copy
    size_t bytes = 0;
    bool copy_back = false;
    DeviceBytes memory;
    std::vector<uint8_t> staging;  // the uploaded bytes: alive until the copy has run
  };

  // NaN bytes over the view's elements only: the gaps keep the host's bytes, so a write
  // into a gap shows on the host after copy_back.
  static void poison_elements(const Tensor& t, const ByteSpan& span,
                              std::vector<uint8_t>* staging) {
    const auto element = static_cast<int64_t>(flashattn::dtype_size(t.dtype));
    for (int64_t offset : element_offsets(t)) {
      std::memset(staging->data() + (offset * element - span.begin), kNanByte,
                  static_cast<size_t>(element));
    }
  }

  cudaStream_t stream_;
  int device_;
  std::vector<Copy> copies_;
};

// The tensors of each entry point and what the call does with them.
void add_common(flashattn::VarlenLayout* varlen, flashattn::AttentionOptions* options,
                std::vector<RoledTensor>* tensors) {
  tensors->insert(tensors->end(), {{&varlen->cu_seqlens_q, Role::kInput},
                                   {&varlen->cu_seqlens_k, Role::kInput},
                                   {&varlen->seqused_k, Role::kInput},
                                   {&options->alibi_slopes, Role::kInput}});
}

std::vector<RoledTensor> tensors_of(flashattn::ForwardArgs* a) {
  std::vector<RoledTensor> tensors = {{&a->q, Role::kInput},    {&a->k, Role::kInput},
                                      {&a->v, Role::kInput},    {&a->out, Role::kOutput},
                                      {&a->lse, Role::kOutput},
                                      {&a->descale.q, Role::kInput},
                                      {&a->descale.k, Role::kInput},
                                      {&a->descale.v, Role::kInput}};
  add_common(&a->varlen, &a->options, &tensors);
  return tensors;
}

std::vector<RoledTensor> tensors_of(flashattn::BackwardArgs* a) {
  std::vector<RoledTensor> tensors = {
      {&a->dout, Role::kInput}, {&a->q, Role::kInput},   {&a->k, Role::kInput},
      {&a->v, Role::kInput},    {&a->out, Role::kInput}, {&a->lse, Role::kInput},
      {&a->dq, Role::kOutput},  {&a->dk, Role::kOutput}, {&a->dv, Role::kOutput}};
  add_common(&a->varlen, &a->options, &tensors);
  return tensors;
}

std::vector<RoledTensor> tensors_of(flashattn::KVCacheArgs* a) {
  return {{&a->q, Role::kInput},
          {&a->k_cache, Role::kInOut},
          {&a->v_cache, Role::kInOut},
          {&a->cache_seqlens, Role::kInput},
          {&a->k_new, Role::kInput},
          {&a->v_new, Role::kInput},
          {&a->block_table, Role::kInput},
          {&a->cache_batch_idx, Role::kInput},
          {&a->cache_leftpad, Role::kInput},
          {&a->rotary_cos, Role::kInput},
          {&a->rotary_sin, Role::kInput},
          {&a->out, Role::kOutput},
          {&a->lse, Role::kOutput},
          {&a->options.alibi_slopes, Role::kInput},
          {&a->descale.q, Role::kInput},
          {&a->descale.k, Role::kInput},
          {&a->descale.v, Role::kInput}};
}

std::string outcome(const Status& status) {
  return status.ok() ? "ok" : std::string(flashattn::to_string(status.code())) + " (" +
                                  status.message() + ")";
}

// Runs `call(device_args, launch)` on device copies of `host_args`; see device_runner.hpp.
// The workspace query must agree with the call: both decide through the same dispatch.
template <class Args, class Call>
Status run_on_device(const Args& host_args, Call call) {
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  Stream stream;
  FA_RETURN_IF_ERROR(stream.create());
  DeviceMirror mirror(stream.get(), device);
  Args args = host_args;
  for (const RoledTensor& t : tensors_of(&args)) {
    FA_RETURN_IF_ERROR(mirror.add(t.tensor, t.role));
  }

  size_t workspace_bytes = 0;
  const Status sized = flashattn::workspace_size(args, Backend::kCuda, &workspace_bytes);
  DeviceBytes workspace;
  // The backward and the KV-cache call get a workspace 4 bytes past an allocation's start:
  // they must not rely on the caller's alignment (their kernels use 16-byte atomics and
  // loads there: the backward's accumulators, the staged q and the split partials).
  constexpr bool kMisaligned = std::is_same_v<Args, flashattn::BackwardArgs> ||
                               std::is_same_v<Args, flashattn::KVCacheArgs>;
  const size_t offset = kMisaligned ? 4 : 0;
  if (sized.ok() && workspace_bytes > 0) {
    FA_RETURN_IF_ERROR(workspace.allocate(workspace_bytes + offset));
    FA_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(workspace.get(), kNanByte, workspace_bytes + offset, stream.get()));
  }
  flashattn::Launch launch;
  launch.backend = Backend::kCuda;
  launch.stream = stream.get();
  launch.workspace = workspace_bytes > 0 ? workspace.get() + offset : nullptr;
  launch.workspace_bytes = workspace_bytes;
  const Status ran = call(args, launch);

  // Copied back even after a rejection, so a test can see that nothing was written.
  FA_RETURN_IF_ERROR(mirror.copy_back());
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (sized.ok() != ran.ok()) {
    return Status(StatusCode::kInternal, "workspace_size said " + outcome(sized) +
                                             " but the call said " + outcome(ran));
  }
  return ran;
}

}  // namespace

fa_test::Runner cuda_runner() {
  fa_test::Runner runner;
  runner.name = "cuda";
  runner.forward = [](const flashattn::ForwardArgs& a) {
    return run_on_device(a, [](const flashattn::ForwardArgs& args, const flashattn::Launch& l) {
      return flashattn::forward(args, l);
    });
  };
  runner.backward = [](const flashattn::BackwardArgs& a) {
    return run_on_device(a, [](const flashattn::BackwardArgs& args, const flashattn::Launch& l) {
      return flashattn::backward(args, l);
    });
  };
  runner.forward_kvcache = [](const flashattn::KVCacheArgs& a) {
    return run_on_device(a, [](const flashattn::KVCacheArgs& args, const flashattn::Launch& l) {
      return flashattn::forward_kvcache(args, l);
    });
  };
  return runner;
}

fa_test::Runner cuda_support_runner() {
  const auto supported = [](const auto& args, const flashattn::Launch& launch) {
    return flashattn::supported(args, launch.backend);
  };
  fa_test::Runner runner;
  runner.name = "cuda supported()";
  runner.forward = [=](const flashattn::ForwardArgs& a) { return run_on_device(a, supported); };
  runner.backward = [=](const flashattn::BackwardArgs& a) { return run_on_device(a, supported); };
  runner.forward_kvcache = [=](const flashattn::KVCacheArgs& a) {
    return run_on_device(a, supported);
  };
  return runner;
}

flashattn::Status cuda_workspace_size(const flashattn::ForwardArgs& host_args, size_t* bytes) {
  return run_on_device(host_args, [bytes](const flashattn::ForwardArgs& args,
                                          const flashattn::Launch& launch) {
    return flashattn::workspace_size(args, launch.backend, bytes);
  });
}

flashattn::Status cuda_workspace_size(const flashattn::KVCacheArgs& host_args, size_t* bytes) {
  return run_on_device(host_args, [bytes](const flashattn::KVCacheArgs& args,
                                          const flashattn::Launch& launch) {
    return flashattn::workspace_size(args, launch.backend, bytes);
  });
}

}  // namespace fa_cuda_test
