// Times backward tile shapes against each other on the benchmark problems (bf16, 16k tokens,
// hidden 2048), deterministic off and on, to choose the tuning table's entries
// (src/cuda/backward_tuning.hpp). Not part of the library build: scripts/gpu-check compiles one
// object per variant with a forced include defining FA_TUNE_ID (i) and FA_TUNE_TILE
// (d,block_m,block_n,warps,min_blocks,sdp_warps_n,kv_warps_n,dq_warps_m) and one driver whose
// include defines FA_TUNE_MAIN and FA_TUNE_LIST (X(i, tile...) ...), then links them.
//
// Only the main kernel is timed (the preprocess and the dQ conversion do not depend on the
// tile). Its inputs are random normals; lse is set to log(seqlen) + 1/2, about what the
// forward gives for such inputs, and D = dot(dO, O) comes from the real preprocess kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "core/params.hpp"
#include "cuda/backward_workspace.hpp"
#include "cuda/sm80/bwd_launch.cuh"
#include "cuda/common/bwd_prepost.cuh"
#include "dense_problem.hpp"
#include "median_time.hpp"

namespace fa_bwd_tune {
using flashattn::Status;
using Params = flashattn::core::BackwardParams;
using flashattn::cuda::BwdWorkspace;
#define FA_CAT(a, b) a##b
#define FA_NAME(i) FA_CAT(variant_, i)

#if defined(FA_TUNE_ID)
template <int D, int BM, int BN, int W, int MB, int SN, int KN, int QM>
struct Tile {
  static constexpr flashattn::cuda::BwdTile value = {BM, BN, W, MB, SN, KN, QM};
};
template <int D, int BM, int BN, int W, int MB, int SN, int KN, int QM>
Status run(const Params& p, const BwdWorkspace& w, cudaStream_t s) {
  return flashattn::cuda::sm80::launch_backward<__nv_bfloat16, D,
                                                Tile<D, BM, BN, W, MB, SN, KN, QM>>(p, w, s);
}
Status FA_NAME(FA_TUNE_ID)(const Params& p, const BwdWorkspace& w, cudaStream_t s) {
  return run<FA_TUNE_TILE>(p, w, s);
}
#endif

#if defined(FA_TUNE_MAIN)
#define X(i, d, bm, bn, wa, mb, sn, kn, qm) \
  Status variant_##i(const Params&, const BwdWorkspace&, cudaStream_t);
FA_TUNE_LIST
#undef X

struct Variant {
  int d, bm, bn, warps, min_blocks, sn, kn, qm;
  Status (*run)(const Params&, const BwdWorkspace&, cudaStream_t);
};

using fa_tune_problem::check;

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout kill
  std::vector<Variant> variants;
#define X(i, d, bm, bn, wa, mb, sn, kn, qm) \
  variants.push_back({d, bm, bn, wa, mb, sn, kn, qm, &variant_##i});
  FA_TUNE_LIST
#undef X
  const int tokens = 16384, hidden = 2048, sets = 3;
  constexpr int kOperands = 8;  // q k v out dout dq dk dv
  std::printf("%-4s %-6s %-6s %-26s %9s %8s %9s %8s %6s\n", "d", "causal", "seqlen",
              "tile(bm,bn,w,mb,sn,kn,qm)", "ms", "TFLOP/s", "det ms", "TFLOP/s", "det+%");
  for (int d : {64, 128, 256}) {
    if (std::none_of(variants.begin(), variants.end(), [&](const Variant& v) { return v.d == d; })) {
      continue;
    }
    const int h = hidden / d;
    const std::vector<void*> buffers =
        fa_tune_problem::random_buffers(tokens, hidden, kOperands * sets);
    if (buffers.empty()) return 1;
    float* lse = nullptr;
    if (!check(cudaMalloc(&lse, static_cast<size_t>(tokens) * h * 4), "malloc")) return 1;
    for (int seqlen : {1024, 4096, 16384}) {
      std::vector<float> lse_host(static_cast<size_t>(tokens) * h,
                                  std::log(static_cast<float>(seqlen)) + 0.5f);
      cudaMemcpy(lse, lse_host.data(), lse_host.size() * 4, cudaMemcpyHostToDevice);
      for (bool causal : {false, true}) {
        Params p;
        fa_tune_problem::set_dense(&p, tokens, hidden, d, seqlen, causal, lse);
        auto with_set = [&](int i) {
          Params q = p;
          flashattn::core::Operand* ops[kOperands] = {&q.q,    &q.k,  &q.v,  &q.out,
                                                      &q.dout, &q.dq, &q.dk, &q.dv};
          for (int j = 0; j < kOperands; ++j) {
            fa_tune_problem::bind(ops[j], buffers[kOperands * (i % sets) + j], hidden, d, seqlen);
          }
          return q;
        };
        // One workspace per set (rotated with the inputs), sized for the smallest block_m.
        std::vector<void*> workspaces(sets);
        std::vector<BwdWorkspace> ws(sets);
        Params sized = p;
        sized.deterministic = true;
        const flashattn::cuda::BwdWorkspaceLayout layout =
            flashattn::cuda::bwd_workspace_layout(sized, 32);
        for (int i = 0; i < sets; ++i) {
          if (!check(cudaMalloc(&workspaces[i], layout.total), "malloc")) return 1;
          Params q = with_set(i);
          q.workspace = workspaces[i];
          q.deterministic = true;
          ws[i] = flashattn::cuda::bwd_workspace(q, 32);
          const flashattn::cuda::RowMap rows{seqlen};
          // The element-by-element form (one warp per row): only D's value matters here.
          flashattn::cuda::bwd_preprocess<__nv_bfloat16, false><<<1024, 256>>>(q, rows, ws[i],
                                                                                   32);
        }
        for (const Variant& v : variants) {
          if (v.d != d) continue;
          float med[2] = {0.f, 0.f};
          for (int det = 0; det < 2; ++det) {
            auto call = [&](int i) {
              Params q = with_set(i);
              q.deterministic = det == 1;
              BwdWorkspace w = ws[i % sets];
              if (det == 1) {
                cudaMemsetAsync(w.turns, 0, w.turns_bytes);
              }
              return v.run(q, w, nullptr);
            };
            const std::optional<float> timed = fa_tune_timing::median_ms(call, 3, 10);
            if (!check(cudaGetLastError(), "variant") || !timed) return 1;
            med[det] = *timed;
          }
          const double flops = 2.5 * 4.0 * tokens * seqlen * hidden / (causal ? 2 : 1);
          char tile[64];
          std::snprintf(tile, sizeof tile, "%d,%d,%d,%d,%d,%d,%d", v.bm, v.bn, v.warps,
                        v.min_blocks, v.sn, v.kn, v.qm);
          std::printf("%-4d %-6s %-6d %-26s %9.3f %8.1f %9.3f %8.1f %6.0f\n", d,
                      causal ? "yes" : "no", seqlen, tile, med[0], flops / (med[0] * 1e-3) / 1e12,
                      med[1], flops / (med[1] * 1e-3) / 1e12, 100.0 * (med[1] / med[0] - 1.0));
        }
        for (void* w : workspaces) cudaFree(w);
      }
    }
    for (void* b : buffers) cudaFree(b);
    cudaFree(lse);
  }
  return check(cudaGetLastError(), "end") ? 0 : 1;
}
#endif

}  // namespace fa_bwd_tune

#if defined(FA_TUNE_MAIN)
int main() { return fa_bwd_tune::main(); }
#endif
