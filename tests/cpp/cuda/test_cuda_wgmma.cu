// The Hopper building blocks (src/cuda/sm90/) on the GPU: one warpgroup computes
// C[64 x N] = A[64 x K] . B for K = 64 and 128, N = 64, 128 and 256, bf16 and fp16, with B
// K-major (stored [N][K], the shape of S = Q K^T) or MN-major (stored [K][N], the shape of
// O = P V), A from shared memory or from registers, and compares every element with an fp64
// host product of the same rounded inputs. The tiles are filled by sm80's cp.async tile copy,
// so this also checks that that copy writes the layout the descriptors describe, and by TMA
// (128-byte swizzle boxes completing on an mbarrier).
// Negative controls: a descriptor that misstates the layout must give wrong products.
//
// Runs only on a compute capability 9.0 device and only when 90a is among the build's
// architectures (FLASHATTN_TEST_SM90A); the kernels are empty in every other device pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/prim/cp_async.cuh"
#include "cuda/common/tile_copy.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/swizzle128_tile.cuh"
#include "cuda/sm90/tensor_map.hpp"
#include "cuda/sm90/tma_load.cuh"
#include "cuda/sm90/wgmma.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"
#include "cuda/sm90/wgmma_fragments.cuh"

namespace fa_cuda_test {
namespace {

using flashattn::cuda::sm90::AccumulatorFragment;
using flashattn::cuda::sm90::encode_descriptor;
using flashattn::cuda::sm90::FragmentCoord;
using flashattn::cuda::sm90::Major;
using flashattn::cuda::sm90::RegisterAFragment;
using flashattn::cuda::sm90::Swizzle;
using flashattn::cuda::sm90::Swizzle128Tile;
using flashattn::cuda::sm90::WgmmaOperand;

constexpr int kM = 64;
constexpr int kThreads = 128;

// A descriptor that misstates the layout, for the negative controls.
enum class Mistake { kNone, kUnswizzledA, kSwappedStridesB };

template <Major kBMajor, int N, int K>
using TileBOf =
    std::conditional_t<kBMajor == Major::kK, Swizzle128Tile<N, K>, Swizzle128Tile<K, N>>;

// Shared memory: A, then B, then slack that a misstated B descriptor may reach (its reads
// stay below B's start + 2 * B's bytes + 4 KB; the TMA kernel's mbarrier sits there too),
// plus the alignment of the first tile.
template <Major kBMajor, int N, int K>
constexpr int smem_bytes() {
  return Swizzle128Tile<kM, K>::kAlignment + Swizzle128Tile<kM, K>::kBytes +
         2 * TileBOf<kBMajor, N, K>::kBytes + 4096;
}

// The product of the tiles at tile_a and tile_b (A from `a` in global memory instead when
// kARegisters), written to c as [64][N].
template <class T, int N, int K, Major kBMajor, bool kARegisters, Mistake kMistake>
__device__ __forceinline__ void multiply_and_store(uint32_t tile_a, uint32_t tile_b, const T* a,
                                                   float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace wg = flashattn::cuda::sm90::warpgroup;
  using OperandA = WgmmaOperand<Swizzle128Tile<kM, K>, Major::kK>;
  using OperandB = WgmmaOperand<TileBOf<kBMajor, N, K>, kBMajor>;
  constexpr bool kTransB = kBMajor == Major::kMN;
  const int tid = threadIdx.x;

  // A in registers comes straight from global memory through the fragment map.
  uint32_t a_regs[K / 16][4];
  if constexpr (kARegisters) {
#pragma unroll
    for (int s = 0; s < K / 16; ++s) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const FragmentCoord at = RegisterAFragment::coord(tid, j);
        const T* pair = a + at.row * K + 16 * s + at.col;
        a_regs[s][j] = static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(pair)) |
                       static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(pair + 1)) << 16;
      }
    }
  }

  // NaN first: the first step runs with accumulate = false and must overwrite it.
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fffffff);
  wg::fence_operands(d);
  wg::fence();
  const uint64_t a_step0 = kMistake == Mistake::kUnswizzledA
                               ? encode_descriptor(tile_a, OperandA::kLeadingBytes,
                                                   OperandA::kStrideBytes, Swizzle::kNone)
                               : OperandA::descriptor(tile_a);
#pragma unroll
  for (int s = 0; s < K / 16; ++s) {
    const uint64_t desc_b = kMistake == Mistake::kSwappedStridesB
                                ? encode_descriptor(tile_b + OperandB::k_step_bytes(s),
                                                    OperandB::kStrideBytes, OperandB::kLeadingBytes)
                                : OperandB::descriptor(tile_b, s);
    if constexpr (kARegisters) {
      wg::mma_rs<N, T, kTransB>(d, a_regs[s], desc_b, s > 0);
    } else {
      wg::mma_ss<N, T, false, kTransB>(d, OperandA::advance(a_step0, s), desc_b, s > 0);
    }
  }
  wg::commit_group();
  wg::wait_group<0>();
  wg::fence_operands(d);

#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const FragmentCoord at = AccumulatorFragment<N>::coord(tid, i);
    c[at.row * N + at.col] = d[i];
  }
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The first 1024-byte boundary of the dynamic shared memory: where the tiles start.
__device__ __forceinline__ uint32_t aligned_smem_base() {
  extern __shared__ uint8_t smem[];
  return (static_cast<uint32_t>(__cvta_generic_to_shared(smem)) + 1023u) & ~1023u;
}
#endif

// Tiles filled by sm80's cp.async tile copy from a [64][K] and B's [N][K] or [K][N].
template <class T, int N, int K, Major kBMajor, bool kARegisters, Mistake kMistake>
__global__ void __launch_bounds__(kThreads) wgmma_product(const T* a, const T* b, float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace prim = flashattn::cuda::prim;
  using TileA = Swizzle128Tile<kM, K>;
  using TileB = TileBOf<kBMajor, N, K>;
  const uint32_t tile_a = aligned_smem_base();
  const uint32_t tile_b = tile_a + TileA::kBytes;
  const int tid = threadIdx.x;
  flashattn::cuda::block::copy_tile_async<kM, K, kThreads>(tile_a, a, K, kM, tid);
  flashattn::cuda::block::copy_tile_async<TileB::kRows, TileB::kCols, kThreads>(
      tile_b, b, TileB::kCols, TileB::kRows, tid);
  prim::thread::cp_async_commit();
  prim::thread::cp_async_wait<0>();
  flashattn::cuda::sm90::warpgroup::fence_proxy_async_shared();
  __syncthreads();
  multiply_and_store<T, N, K, kBMajor, kARegisters, kMistake>(tile_a, tile_b, a, c);
#endif
}

// Tiles loaded by TMA from the matrices' element (kTmaOffset, kTmaOffset) on, the maps
// covering matrices padded by kTmaOffset rows and columns in front.
constexpr int kTmaOffset = 64;

template <class T, int N, int K, Major kBMajor>
__global__ void __launch_bounds__(kThreads)
    wgmma_product_tma(const __grid_constant__ CUtensorMap map_a,
                      const __grid_constant__ CUtensorMap map_b, float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace sm90 = flashattn::cuda::sm90;
  using TileA = Swizzle128Tile<kM, K>;
  using TileB = TileBOf<kBMajor, N, K>;
  const uint32_t tile_a = aligned_smem_base();
  const uint32_t tile_b = tile_a + TileA::kBytes;
  const uint32_t bar = tile_b + TileB::kBytes;
  if (threadIdx.x == 0) {
    sm90::mbarrier::init(bar, 1);
    sm90::mbarrier::fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::mbarrier::arrive_expect_tx(bar, TileA::kBytes + TileB::kBytes);
    sm90::tma::load_tile<TileA>(tile_a, &map_a, kTmaOffset, kTmaOffset, bar);
    sm90::tma::load_tile<TileB>(tile_b, &map_b, kTmaOffset, kTmaOffset, bar);
  }
  sm90::mbarrier::wait(bar, 0);
  multiply_and_store<T, N, K, kBMajor, false, Mistake::kNone>(tile_a, tile_b, nullptr, c);
#endif
}

template <class T>
float round_to(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__float2bfloat16(x));
  else
    return __half2float(__float2half(x));
}

template <class T>
T to_element(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, __nv_bfloat16> ? "bf16" : "fp16";
}

#define FA_CUDA_OK(call)                                                             \
  do {                                                                               \
    const cudaError_t status_ = (call);                                              \
    ASSERT_EQ(status_, cudaSuccess) << #call << ": " << cudaGetErrorString(status_); \
  } while (0)

// The tile as the middle of a matrix padded by kTmaOffset rows and columns in front, the
// padding a value no product of the test's inputs comes near.
template <class T>
std::vector<T> padded_for_tma(const std::vector<T>& tile, int rows, int cols) {
  const int pitch = cols + kTmaOffset;
  std::vector<T> out(static_cast<size_t>(rows + kTmaOffset) * pitch, to_element<T>(1000.f));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c)
      out[(r + kTmaOffset) * pitch + kTmaOffset + c] = tile[r * cols + c];
  }
  return out;
}

// Runs one product and returns the worst |C - ref| / tolerance over all 64 x N elements
// (infinity for a NaN). The tolerance, 5e-4 of sum_k |a b|, is ~10x the fp32 rounding the
// tensor cores may add over K <= 128 exact products; a misread layout errs by O(1) of it.
// kTma: the tiles come through TMA (wgmma_product_tma) instead of cp.async.
template <class T, int N, int K, Major kBMajor, bool kARegisters, Mistake kMistake, bool kTma>
void run_product(uint32_t seed, double* worst) {
  static_assert(!kTma || (!kARegisters && kMistake == Mistake::kNone), "TMA runs plain products");
  using TileB = TileBOf<kBMajor, N, K>;
  *worst = std::numeric_limits<double>::infinity();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  std::vector<float> a(kM * K), b(N * K);
  for (float& x : a) x = round_to<T>(uniform(gen));
  for (float& x : b) x = round_to<T>(uniform(gen));
  // B(k, n): b is [N][K] when K-major, [K][N] when MN-major (TileB's rows and columns).
  auto b_at = [&](int k, int n) { return kBMajor == Major::kK ? b[n * K + k] : b[k * N + n]; };
  std::vector<T> a_lowp(a.size()), b_lowp(b.size());
  for (size_t i = 0; i < a.size(); ++i) a_lowp[i] = to_element<T>(a[i]);
  for (size_t i = 0; i < b.size(); ++i) b_lowp[i] = to_element<T>(b[i]);
  if (kTma) {
    a_lowp = padded_for_tma(a_lowp, kM, K);
    b_lowp = padded_for_tma(b_lowp, TileB::kRows, TileB::kCols);
  }

  T *a_dev = nullptr, *b_dev = nullptr;
  float* c_dev = nullptr;
  FA_CUDA_OK(cudaMalloc(&a_dev, a_lowp.size() * sizeof(T)));
  FA_CUDA_OK(cudaMalloc(&b_dev, b_lowp.size() * sizeof(T)));
  FA_CUDA_OK(cudaMalloc(&c_dev, kM * N * sizeof(float)));
  FA_CUDA_OK(cudaMemcpy(a_dev, a_lowp.data(), a_lowp.size() * sizeof(T), cudaMemcpyHostToDevice));
  FA_CUDA_OK(cudaMemcpy(b_dev, b_lowp.data(), b_lowp.size() * sizeof(T), cudaMemcpyHostToDevice));
  FA_CUDA_OK(cudaMemset(c_dev, 0xff, kM * N * sizeof(float)));  // NaN where nothing is written
  constexpr int kSmem = smem_bytes<kBMajor, N, K>();
  if constexpr (kTma) {
    CUtensorMap map_a{}, map_b{};
    const std::string error_a = flashattn::cuda::sm90::encode_panel_tensor_map(
        &map_a, a_dev, kM + kTmaOffset, K + kTmaOffset, K + kTmaOffset, kM);
    ASSERT_EQ(error_a, "");
    const std::string error_b = flashattn::cuda::sm90::encode_panel_tensor_map(
        &map_b, b_dev, TileB::kRows + kTmaOffset, TileB::kCols + kTmaOffset,
        TileB::kCols + kTmaOffset, TileB::kRows);
    ASSERT_EQ(error_b, "");
    auto kernel = wgmma_product_tma<T, N, K, kBMajor>;
    FA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    kernel<<<1, kThreads, kSmem>>>(map_a, map_b, c_dev);
  } else {
    auto kernel = wgmma_product<T, N, K, kBMajor, kARegisters, kMistake>;
    FA_CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    kernel<<<1, kThreads, kSmem>>>(a_dev, b_dev, c_dev);
  }
  FA_CUDA_OK(cudaGetLastError());
  FA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> c(kM * N);
  FA_CUDA_OK(cudaMemcpy(c.data(), c_dev, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  FA_CUDA_OK(cudaFree(a_dev));
  FA_CUDA_OK(cudaFree(b_dev));
  FA_CUDA_OK(cudaFree(c_dev));

  double max_ratio = 0.0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < N; ++n) {
      double ref = 0.0, magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        const double p = static_cast<double>(a[m * K + k]) * b_at(k, n);
        ref += p;
        magnitude += std::fabs(p);
      }
      const double ratio = std::fabs(c[m * N + n] - ref) / (5e-4 * magnitude + 1e-6);
      if (!(ratio <= max_ratio)) {
        max_ratio = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : ratio;
      }
    }
  }
  *worst = max_ratio;
}

template <class T, int N, int K, Major kBMajor, bool kARegisters, Mistake kMistake = Mistake::kNone,
          bool kTma = false>
void check_product(uint32_t seed) {
  std::ostringstream name;
  name << dtype_name<T>() << " N=" << N << " K=" << K
       << (kBMajor == Major::kK ? " B K-major" : " B MN-major")
       << (kARegisters ? " A in registers" : " A in shared memory")
       << (kTma ? " (TMA)" : " (cp.async)");
  SCOPED_TRACE(name.str());
  double worst = 0.0;
  run_product<T, N, K, kBMajor, kARegisters, kMistake, kTma>(seed, &worst);
  if (kMistake == Mistake::kNone) {
    EXPECT_LE(worst, 1.0) << "worst error / tolerance";
  } else {
    EXPECT_GT(worst, 1.0) << "a misstated layout gave the right product (worst error / tolerance)";
  }
}

template <class T, int K, Major kBMajor, bool kARegisters>
void check_all_n(uint32_t seed) {
  check_product<T, 64, K, kBMajor, kARegisters>(seed);
  check_product<T, 128, K, kBMajor, kARegisters>(seed + 1);
  check_product<T, 256, K, kBMajor, kARegisters>(seed + 2);
}

class CudaWgmma : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(FLASHATTN_TEST_SM90A)
    GTEST_SKIP() << "built without 90a in FLASHATTN_CUDA_ARCHS";
#endif
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      GTEST_SKIP() << "no CUDA device is visible";
    }
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major != 9 || prop.minor != 0) {
      GTEST_SKIP() << "wgmma (sm_90a) needs a compute capability 9.0 device, this is " << prop.major
                   << "." << prop.minor;
    }
  }
};

TEST_F(CudaWgmma, KMajorBLikeQKTranspose) {
  check_all_n<__nv_bfloat16, 64, Major::kK, false>(100);
  check_all_n<__nv_bfloat16, 128, Major::kK, false>(110);
  check_all_n<__half, 64, Major::kK, false>(120);
  check_all_n<__half, 128, Major::kK, false>(130);
}

TEST_F(CudaWgmma, MNMajorBLikePV) {
  check_all_n<__nv_bfloat16, 64, Major::kMN, false>(200);
  check_all_n<__nv_bfloat16, 128, Major::kMN, false>(210);
  check_all_n<__half, 64, Major::kMN, false>(220);
  check_all_n<__half, 128, Major::kMN, false>(230);
}

TEST_F(CudaWgmma, AFromRegisters) {
  check_all_n<__nv_bfloat16, 64, Major::kK, true>(300);
  check_all_n<__nv_bfloat16, 64, Major::kMN, true>(310);
  check_all_n<__half, 64, Major::kK, true>(320);
  check_all_n<__half, 128, Major::kMN, true>(330);
}

TEST_F(CudaWgmma, MisstatedLayoutsFail) {
  check_product<__nv_bfloat16, 64, 64, Major::kK, false, Mistake::kUnswizzledA>(400);
  check_product<__nv_bfloat16, 128, 64, Major::kK, false, Mistake::kSwappedStridesB>(401);
  check_product<__nv_bfloat16, 64, 64, Major::kMN, false, Mistake::kSwappedStridesB>(402);
  check_product<__half, 256, 128, Major::kMN, false, Mistake::kSwappedStridesB>(403);
}

// The same products from tiles that TMA loaded (128-byte swizzle boxes, one per panel) at a
// nonzero offset of a padded matrix.
TEST_F(CudaWgmma, TmaLoadedTiles) {
  check_product<__nv_bfloat16, 128, 128, Major::kK, false, Mistake::kNone, true>(500);
  check_product<__nv_bfloat16, 64, 64, Major::kMN, false, Mistake::kNone, true>(501);
  check_product<__half, 256, 64, Major::kMN, false, Mistake::kNone, true>(502);
  check_product<__half, 256, 128, Major::kK, false, Mistake::kNone, true>(503);
}

}  // namespace
}  // namespace fa_cuda_test
