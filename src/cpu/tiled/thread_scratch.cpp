#include "cpu/tiled/thread_scratch.hpp"

#include <omp.h>

#include <string>

namespace flashattn::cpu::tiled {
namespace {

constexpr size_t kAlignmentBytes = 64;

float* aligned_floats(size_t floats) {
  const size_t bytes = (floats * sizeof(float) + kAlignmentBytes - 1) / kAlignmentBytes *
                       kAlignmentBytes;
  return static_cast<float*>(
      std::aligned_alloc(kAlignmentBytes, bytes == 0 ? kAlignmentBytes : bytes));
}

Status out_of_memory(size_t floats) {
  return Status(StatusCode::kInternal, "cpu backend: cannot allocate " +
                                           std::to_string(floats * sizeof(float)) +
                                           " bytes of scratch");
}

}  // namespace

Status ThreadScratch::allocate(size_t floats_per_thread) {
  stride_ = (floats_per_thread + 15) / 16 * 16;
  const size_t threads = static_cast<size_t>(omp_get_max_threads());
  memory_.reset(aligned_floats(stride_ * threads));
  return memory_ ? Status::Ok() : out_of_memory(stride_ * threads);
}

Status FloatBuffer::allocate(size_t floats) {
  memory_.reset(aligned_floats(floats));
  return memory_ ? Status::Ok() : out_of_memory(floats);
}

}  // namespace flashattn::cpu::tiled
