// Times Hopper forward tiles (sm90/fwd_kernel.cuh) against each other on the benchmark problems
// (bf16, 16k tokens, hidden 2048), to choose the entries of fwd_sm90_tile
// (src/cuda/forward_tuning.hpp). Built like fwd_tune.cu by scripts/gpu-check --tune: one object
// per variant with FA_TUNE_ID (i) and FA_TUNE_TILE (d,block_m,block_n,stages), one driver
// with FA_TUNE_MAIN and FA_TUNE_LIST (X(i, tile...) ...).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "core/params.hpp"
#include "cuda/sm90/fwd_launch.cuh"
#include "dense_problem.hpp"
#include "median_time.hpp"

namespace fa_tune {
using flashattn::Status;
using Params = flashattn::core::AttentionParams;

#if defined(FA_TUNE_ID)
template <int BM, int BN, int ST>
struct Tile {
  static constexpr flashattn::cuda::FwdSm90Tile value = {BM, BN, ST};
};
template <int D, int BM, int BN, int ST>
Status run(const Params& p, cudaStream_t s) {
  using Shape = flashattn::cuda::sm90::FwdShape<D, D, Tile<BM, BN, ST>>;
  return flashattn::cuda::sm90::launch_forward<__nv_bfloat16, Shape>(p, s);
}
#define FA_CAT(a, b) a##b
#define FA_NAME(i) FA_CAT(variant_, i)
Status FA_NAME(FA_TUNE_ID)(const Params& p, cudaStream_t s) { return run<FA_TUNE_TILE>(p, s); }
#endif

#if defined(FA_TUNE_MAIN)
#define X(i, d, bm, bn, st) Status variant_##i(const Params&, cudaStream_t);
FA_TUNE_LIST
#undef X

struct Variant {
  int d, bm, bn, stages;
  Status (*run)(const Params&, cudaStream_t);
};

int main() {
  std::vector<Variant> variants;
#define X(i, d, bm, bn, st) variants.push_back({d, bm, bn, st, &variant_##i});
  FA_TUNE_LIST
#undef X
  const int tokens = 16384, hidden = 2048, sets = 4;
  std::printf("%-5s %-6s %-7s %-14s %9s %9s\n", "d", "causal", "seqlen", "tile(bm,bn,st)", "ms",
              "TFLOP/s");
  for (int d : {64, 96, 128, 192, 256}) {
    bool any = false;
    for (const Variant& v : variants) any = any || v.d == d;
    if (!any) continue;
    const int h = hidden / d;
    const std::vector<void*> buffers = fa_tune_problem::random_buffers(tokens, hidden, 4 * sets);
    if (buffers.empty()) return 1;
    float* lse = nullptr;
    if (!fa_tune_problem::check(cudaMalloc(&lse, static_cast<size_t>(tokens) * h * 4), "malloc")) {
      return 1;
    }
    for (int seqlen : {1024, 4096, 16384}) {
      for (bool causal : {false, true}) {
        for (const Variant& v : variants) {
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
          char tile[48];
          std::snprintf(tile, sizeof tile, "%d,%d,%d", v.bm, v.bn, v.stages);
          std::printf("%-5d %-6s %-7d %-14s %9.3f %9.1f\n", d, causal ? "yes" : "no", seqlen, tile,
                      *timed, flops / (*timed * 1e-3) / 1e12);
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
#endif

}  // namespace fa_tune

#if defined(FA_TUNE_MAIN)
int main() { return fa_tune::main(); }
#endif
