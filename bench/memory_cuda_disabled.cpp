// make_cuda_memory() of a build without CUDA.
#include "memory.hpp"

namespace fa_bench {
std::unique_ptr<Memory> make_cuda_memory() { return nullptr; }
}  // namespace fa_bench
