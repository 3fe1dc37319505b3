// CUDA buffers and event timing. Compiled only in CUDA builds.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "memory.hpp"

namespace fa_bench {
namespace {

// The benchmark cannot continue after a runtime error: report it and exit.
void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "flashattn-bench: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(2);
}

class CudaMemory final : public Memory {
 public:
  CudaMemory() {
    check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaGetDeviceProperties(&properties_, device_), "cudaGetDeviceProperties");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaMemory() override {
    cudaStreamSynchronize(stream_);
    for (void* p : buffers_) cudaFree(p);
    cudaStreamDestroy(stream_);
  }
  flashattn::Device device() const override { return {flashattn::DeviceType::kCUDA, device_}; }
  std::string device_name() const override { return properties_.name; }
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes == 0 ? 1 : bytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    buffers_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  void* stream() override { return stream_; }
  void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  size_t cache_bytes() const override { return static_cast<size_t>(properties_.l2CacheSize); }
  size_t device_used_bytes() const override {
    size_t free = 0, total = 0;
    return cudaMemGetInfo(&free, &total) == cudaSuccess ? total - free : 0;
  }

  std::vector<double> time(const std::function<flashattn::Status(int)>& call, int warmup,
                           int iters, flashattn::Status* status) override {
    for (int i = 0; i < warmup; ++i) {
      *status = call(i);
      if (!status->ok()) return {};
    }
    std::vector<cudaEvent_t> events(2 * static_cast<size_t>(iters));
    for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
    for (int i = 0; i < iters; ++i) {
      check(cudaEventRecord(events[2 * i], stream_), "cudaEventRecord");
      *status = call(warmup + i);
      check(cudaEventRecord(events[2 * i + 1], stream_), "cudaEventRecord");
      if (!status->ok()) break;
    }
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize after timing");
    check(cudaGetLastError(), "kernel launch");
    std::vector<double> ms;
    for (int i = 0; status->ok() && i < iters; ++i) {
      float elapsed = 0.f;
      check(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]), "cudaEventElapsedTime");
      ms.push_back(elapsed);
    }
    for (auto& e : events) cudaEventDestroy(e);
    return ms;
  }

 private:
  int device_ = 0;
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
};

}  // namespace

std::unique_ptr<Memory> make_cuda_memory() {
  if (!flashattn::cuda_available()) return nullptr;
  return std::make_unique<CudaMemory>();
}

}  // namespace fa_bench
