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
#include "forward_grid.hpp"

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

int main() {
  std::vector<ForwardVariant> variants;
#define X(i, d, bm, bn, st) variants.push_back({d, #bm "," #bn "," #st, &variant_##i});
  FA_TUNE_LIST
#undef X
  return run_forward_grid(variants, {64, 96, 128, 192, 256}, {1024, 4096, 16384});
}
#endif

}  // namespace fa_tune

#if defined(FA_TUNE_MAIN)
int main() { return fa_tune::main(); }
#endif
