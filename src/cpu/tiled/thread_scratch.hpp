// One 64-byte aligned scratch slice per OpenMP thread, allocated before the parallel
// region, so running out of memory is a Status rather than a terminate inside OpenMP.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "flashattn/flashattn.hpp"

namespace flashattn::cpu::tiled {

class ThreadScratch {
 public:
  // Floats per slice; every thread of the next parallel region gets one.
  Status allocate(size_t floats_per_thread);
  float* slice(int thread) const { return memory_.get() + static_cast<size_t>(thread) * stride_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> memory_;
  size_t stride_ = 0;
};

// Heap floats that may fail without throwing (split-KV partial results).
class FloatBuffer {
 public:
  Status allocate(size_t floats);
  float* data() const { return memory_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> memory_;
};

}  // namespace flashattn::cpu::tiled
