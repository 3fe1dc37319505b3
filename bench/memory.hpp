// Where flashattn-bench keeps its buffers and how it times calls: host memory with a
// wall clock, or CUDA memory with events on a stream.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace fa_bench {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual flashattn::Device device() const = 0;
  virtual std::string device_name() const = 0;
  // Freed with the Memory. Returns nullptr when the allocation fails.
  virtual void* allocate(size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void* stream() = 0;
  // Last-level cache bytes an input set should exceed so repeated runs do not hit in it.
  virtual size_t cache_bytes() const = 0;
  // Device memory in use on the whole device (CUDA: total - free), 0 for host memory: read
  // around the timed calls to show that the library allocates nothing of its own.
  virtual size_t device_used_bytes() const { return 0; }
  // Waits for the work queued on stream() (CUDA); nothing to wait for on the host.
  virtual void synchronize() {}
  // Runs `call(i)` `warmup` times, then `iters` times, returning each timed call's
  // milliseconds; stops at the first failed call and reports it in `status`.
  virtual std::vector<double> time(const std::function<flashattn::Status(int)>& call, int warmup,
                                   int iters, flashattn::Status* status) = 0;
};

std::unique_ptr<Memory> make_host_memory();
// nullptr when this build has no CUDA or no GPU is visible.
std::unique_ptr<Memory> make_cuda_memory();

}  // namespace fa_bench
