// Times forward tile shapes against each other on the benchmark problems (bf16, 16k tokens,
// hidden 2048), to choose the tuning table's entries (src/cuda/forward_tuning.hpp). Not part
// of the library build: scripts/gpu-check compiles one object per variant with a forced
// include defining FA_TUNE_ID (i) and FA_TUNE_TILE (d,block_m,block_n,warps,stages,min_blocks)
// and one driver whose include defines FA_TUNE_MAIN and FA_TUNE_LIST (X(i, tile...) ...),
// then links them.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/params.hpp"
#include "cuda/sm80/fwd_launch.cuh"
#include "forward_grid.hpp"

namespace fa_tune {
using flashattn::Status;
using Params = flashattn::core::AttentionParams;
#define FA_CAT(a, b) a##b
#define FA_NAME(i) FA_CAT(variant_, i)

#if defined(FA_TUNE_ID)
template <int D, int BM, int BN, int W, int ST, int MB>
struct Tile {
  static constexpr flashattn::cuda::FwdTile value = {BM, BN, W, ST, MB};
};
template <int D, int BM, int BN, int W, int ST, int MB>
Status run(const Params& p, cudaStream_t s) {
  return flashattn::cuda::sm80::launch_forward<__nv_bfloat16, D, Tile<D, BM, BN, W, ST, MB>>(p, s);
}
Status FA_NAME(FA_TUNE_ID)(const Params& p, cudaStream_t s) { return run<FA_TUNE_TILE>(p, s); }
#endif

#if defined(FA_TUNE_MAIN)
#define X(i, d, bm, bn, w, st, mb) Status variant_##i(const Params&, cudaStream_t);
FA_TUNE_LIST
#undef X

int main() {
  std::vector<ForwardVariant> variants;
#define X(i, d, bm, bn, w, st, mb) \
  variants.push_back({d, #bm "," #bn "," #w "," #st "," #mb, &variant_##i});
  FA_TUNE_LIST
#undef X
  return run_forward_grid(variants, {64, 128, 256}, {512, 2048, 8192});
}
#endif

}  // namespace fa_tune

#if defined(FA_TUNE_MAIN)
int main() { return fa_tune::main(); }
#endif
