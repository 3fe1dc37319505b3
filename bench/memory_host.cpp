#include <chrono>
#include <cstdlib>
#include <cstring>

#include "memory.hpp"

namespace fa_bench {
namespace {

class HostMemory final : public Memory {
 public:
  ~HostMemory() override {
    for (void* p : buffers_) std::free(p);
  }
  flashattn::Device device() const override { return {flashattn::DeviceType::kCPU, 0}; }
  std::string device_name() const override { return "cpu"; }
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p != nullptr) buffers_.push_back(p);
    return p;
  }
  void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  size_t cache_bytes() const override { return 0; }  // CPU problems are timed on one set

  std::vector<double> time(const std::function<flashattn::Status(int)>& call, int warmup,
                           int iters, flashattn::Status* status) override {
    std::vector<double> ms;
    for (int i = 0; i < warmup + iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      *status = call(i);
      const auto stop = std::chrono::steady_clock::now();
      if (!status->ok()) return {};
      if (i >= warmup) ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
    return ms;
  }

 private:
  static void copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  std::vector<void*> buffers_;
};

}  // namespace

std::unique_ptr<Memory> make_host_memory() { return std::make_unique<HostMemory>(); }

}  // namespace fa_bench
