// The forward tuners' grid (fwd_tune.cu for the sm80 kernel, fwd90_tune.cu for the Hopper
// one): every variant of a head dim on the benchmark problems (bf16, 16k tokens, hidden 2048,
// causal and not), a line per (head dim, causal, seqlen, variant) with its median time and
// TFLOP/s. Input sets rotate so that the L2 cannot flatter a variant.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/params.hpp"
#include "dense_problem.hpp"
#include "median_time.hpp"

namespace fa_tune {

struct ForwardVariant {
  int d;
  std::string tile;  // printed as it is
  flashattn::Status (*run)(const flashattn::core::AttentionParams&, cudaStream_t);
};

inline int run_forward_grid(const std::vector<ForwardVariant>& variants,
                            const std::vector<int>& head_dims, const std::vector<int>& seqlens) {
  using Params = flashattn::core::AttentionParams;
  const int tokens = 16384, hidden = 2048, sets = 4;
  std::printf("%-5s %-6s %-7s %-22s %9s %9s\n", "d", "causal", "seqlen", "tile", "ms", "TFLOP/s");
  for (int d : head_dims) {
    bool any = false;
    for (const ForwardVariant& v : variants) any = any || v.d == d;
    if (!any) continue;
    const int h = hidden / d;
    const std::vector<void*> buffers = fa_tune_problem::random_buffers(tokens, hidden, 4 * sets);
    if (buffers.empty()) return 1;
    float* lse = nullptr;
    if (!fa_tune_problem::check(cudaMalloc(&lse, static_cast<size_t>(tokens) * h * 4), "malloc")) {
      return 1;
    }
    for (int seqlen : seqlens) {
      for (bool causal : {false, true}) {
        for (const ForwardVariant& v : variants) {
          if (v.d != d) continue;
          Params p;
          fa_tune_problem::set_dense(&p, tokens, hidden, d, seqlen, causal, lse);
          auto call = [&](int i) {
            Params q = p;
            flashattn::core::Operand* ops[] = {&q.q, &q.k, &q.v, &q.out};
            for (int j = 0; j < 4; ++j) {
              fa_tune_problem::bind(ops[j], buffers[4 * (i % sets) + j], hidden, d, seqlen);
            }
            return v.run(q, nullptr);
          };
          const std::optional<float> timed = fa_tune_timing::median_ms(call, 5, 20);
          if (!timed) continue;
          const double flops = 4.0 * tokens * seqlen * hidden / (causal ? 2 : 1);
          std::printf("%-5d %-6s %-7d %-22s %9.3f %9.1f\n", d, causal ? "yes" : "no", seqlen,
                      v.tile.c_str(), *timed, flops / (*timed * 1e-3) / 1e12);
        }
      }
    }
    for (void* b : buffers) cudaFree(b);
    cudaFree(lse);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}

}  // namespace fa_tune
