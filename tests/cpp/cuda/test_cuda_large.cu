// Past 2^31 elements (SPEC: offsets are 64-bit): a causal forward and backward whose q, k,
// v and out hold more than 2^31 elements each (batch 1, seqlen 2^20 + 256, 16 heads,
// d = 128, bf16: 4.3 GB per tensor, about 40 GB in all with the gradients and the
// backward's fp32 accumulator), and a paged KV cache of more than 2^31 elements. Inputs
// are a hash of (tensor, element index), filled on the device and recomputed on the host,
// so the fp64 reference of a sampled row reads no copy of the inputs.
//
// DISABLED_ (they take minutes and most of an H200): run them with
//   flashattn_tests --gtest_also_run_disabled_tests --gtest_filter='CudaLarge.*'
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flashattn/flashattn.hpp"

namespace {

using flashattn::DType;
using flashattn::Tensor;

// A value in [-1, 1) for element `index` of tensor `id`, already a bf16 (low 16 bits 0).
__host__ __device__ inline float hashed_value(uint32_t id, uint64_t index) {
  uint64_t x = index * 0x9E3779B97F4A7C15ull + id * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  const uint32_t bits = static_cast<uint32_t>(x >> 40);  // 24 random bits
  const float value = static_cast<float>(bits) * (2.f / 16777216.f) - 1.f;
  uint32_t f;
  memcpy(&f, &value, 4);
  f &= 0xFFFF0000u;  // truncate to bf16, so host and device agree exactly
  float rounded;
  memcpy(&rounded, &f, 4);
  return rounded;
}

__global__ void fill_hashed(__nv_bfloat16* data, uint64_t count, uint32_t id) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < count;
       i += uint64_t(gridDim.x) * blockDim.x) {
    data[i] = __float2bfloat16(hashed_value(id, i));
  }
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
};

bool has_gpu_memory(size_t bytes) {
  if (!flashattn::cuda_available()) return false;
  size_t free_bytes = 0, total = 0;
  return cudaMemGetInfo(&free_bytes, &total) == cudaSuccess && free_bytes > bytes;
}

Tensor device_tensor(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return flashattn::make_tensor(data, dtype, shape, {flashattn::DeviceType::kCUDA, 0});
}

std::vector<float> bf16_row(const void* device, uint64_t index, int count) {
  std::vector<__nv_bfloat16> raw(count);
  cudaMemcpy(raw.data(), static_cast<const __nv_bfloat16*>(device) + index,
             count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
  std::vector<float> row(count);
  for (int i = 0; i < count; ++i) row[i] = __bfloat162float(raw[i]);
  return row;
}

constexpr uint32_t kQ = 1, kK = 2, kV = 3, kDout = 4;
constexpr int64_t kSeq = (int64_t{1} << 20) + 256, kHeads = 16, kDim = 128;

uint64_t at(int64_t row, int64_t head, int64_t c) { return (row * kHeads + head) * kDim + c; }

// Row `i` of head `h` of the causal problem: (lse, out) in fp64 from the hashed inputs.
void reference_row(int64_t i, int64_t h, double scale, double* lse, std::vector<double>* out) {
  std::vector<double> scores(i + 1);
  double top = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) {
    double s = 0;
    for (int c = 0; c < kDim; ++c)
      s += double(hashed_value(kQ, at(i, h, c))) * hashed_value(kK, at(j, h, c));
    scores[j] = scale * s;
    top = std::max(top, scores[j]);
  }
  double sum = 0;
  for (double s : scores) sum += std::exp(s - top);
  *lse = top + std::log(sum);
  out->assign(kDim, 0.0);
  for (int64_t j = 0; j <= i; ++j) {
    const double p = std::exp(scores[j] - *lse);
    for (int c = 0; c < kDim; ++c) (*out)[c] += p * hashed_value(kV, at(j, h, c));
  }
}

TEST(CudaLarge, DISABLED_ForwardAndBackwardPast2To31Elements) {
  const uint64_t count = uint64_t(kSeq) * kHeads * kDim;  // > 2^31
  ASSERT_GT(count, uint64_t{1} << 31);
  const size_t bytes = count * 2;
  if (!has_gpu_memory(9 * bytes + count * 4 + (size_t{1} << 30))) {
    GTEST_SKIP() << "needs a GPU with about 50 GB free";
  }
  DeviceBuffer q(bytes), k(bytes), v(bytes), out(bytes), dout(bytes), dq(bytes), dk(bytes),
      dv(bytes), lse(size_t(kHeads) * kSeq * 4);
  for (void* p : {q.ptr, k.ptr, v.ptr, out.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr, lse.ptr}) {
    ASSERT_NE(p, nullptr);
  }
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(q.ptr), count, kQ);
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(k.ptr), count, kK);
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(v.ptr), count, kV);
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(dout.ptr), count, kDout);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::initializer_list<int64_t> shape = {1, kSeq, kHeads, kDim};
  flashattn::ForwardArgs f;
  f.q = device_tensor(q.ptr, DType::kBF16, shape);
  f.k = device_tensor(k.ptr, DType::kBF16, shape);
  f.v = device_tensor(v.ptr, DType::kBF16, shape);
  f.out = device_tensor(out.ptr, DType::kBF16, shape);
  f.lse = device_tensor(lse.ptr, DType::kF32, {1, kHeads, kSeq});
  f.options.causal = true;
  const flashattn::Launch launch{flashattn::Backend::kCuda};
  flashattn::Status status = flashattn::forward(f, launch);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const double scale = 1.0 / std::sqrt(double(kDim));
  // Rows across the whole range, the last ones past 2^31 elements from the start.
  const int64_t rows[] = {0, 1000, (int64_t{1} << 19) + 7, kSeq - 1};
  for (int64_t i : rows) {
    for (int64_t h : {int64_t{0}, kHeads - 1}) {
      double lse_ref = 0;
      std::vector<double> out_ref;
      reference_row(i, h, scale, &lse_ref, &out_ref);
      float lse_got = 0;
      cudaMemcpy(&lse_got, static_cast<float*>(lse.ptr) + h * kSeq + i, 4, cudaMemcpyDeviceToHost);
      EXPECT_NEAR(lse_got, lse_ref, 1e-3 * std::max(1.0, std::fabs(lse_ref))) << "row " << i;
      const std::vector<float> got = bf16_row(out.ptr, at(i, h, 0), kDim);
      double worst = 0, magnitude = 1e-3;
      for (int c = 0; c < kDim; ++c) {
        worst = std::max(worst, std::fabs(got[c] - out_ref[c]));
        magnitude = std::max(magnitude, std::fabs(out_ref[c]));
      }
      EXPECT_LE(worst, 2e-2 * magnitude + 1e-3) << "out row " << i << " head " << h;
    }
  }

  flashattn::BackwardArgs b;
  b.q = f.q;
  b.k = f.k;
  b.v = f.v;
  b.out = f.out;
  b.lse = f.lse;
  b.dout = device_tensor(dout.ptr, DType::kBF16, shape);
  b.dq = device_tensor(dq.ptr, DType::kBF16, shape);
  b.dk = device_tensor(dk.ptr, DType::kBF16, shape);
  b.dv = device_tensor(dv.ptr, DType::kBF16, shape);
  b.options = f.options;
  size_t workspace_bytes = 0;
  status = flashattn::workspace_size(b, flashattn::Backend::kCuda, &workspace_bytes);
  ASSERT_TRUE(status.ok()) << status.message();
  DeviceBuffer workspace(workspace_bytes);
  ASSERT_TRUE(workspace_bytes == 0 || workspace.ptr != nullptr);
  status =
      flashattn::backward(b, {flashattn::Backend::kCuda, nullptr, workspace.ptr, workspace_bytes});
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // dv of a key j: sum over the rows i >= j of p_ij dout_i (the kernel's lse for p).
  // Sampled near the end, where few rows see the key, to keep the host loop short.
  std::vector<float> lse_host(kSeq);
  for (int64_t h : {int64_t{0}, kHeads - 1}) {
    cudaMemcpy(lse_host.data(), static_cast<float*>(lse.ptr) + h * kSeq, kSeq * 4,
               cudaMemcpyDeviceToHost);
    for (int64_t j : {kSeq - 1, kSeq - 3000}) {
      std::vector<double> dv_ref(kDim, 0.0);
      for (int64_t i = j; i < kSeq; ++i) {
        double s = 0;
        for (int c = 0; c < kDim; ++c)
          s += double(hashed_value(kQ, at(i, h, c))) * hashed_value(kK, at(j, h, c));
        const double p = std::exp(scale * s - lse_host[i]);
        for (int c = 0; c < kDim; ++c) dv_ref[c] += p * hashed_value(kDout, at(i, h, c));
      }
      const std::vector<float> got = bf16_row(dv.ptr, at(j, h, 0), kDim);
      double worst = 0, magnitude = 1e-3;
      for (int c = 0; c < kDim; ++c) {
        worst = std::max(worst, std::fabs(got[c] - dv_ref[c]));
        magnitude = std::max(magnitude, std::fabs(dv_ref[c]));
      }
      EXPECT_LE(worst, 2e-2 * magnitude + 1e-3) << "dv key " << j << " head " << h;
    }
  }
  // dq of a row i: scale * sum_j dS_ij k_j with dS_ij = p_ij (dout_i . v_j - dout_i . out_i).
  for (int64_t i : {int64_t{5}, (int64_t{1} << 20) + 100}) {
    const int64_t h = 3;
    const std::vector<float> out_row = bf16_row(out.ptr, at(i, h, 0), kDim);
    float lse_i = 0;
    cudaMemcpy(&lse_i, static_cast<float*>(lse.ptr) + h * kSeq + i, 4, cudaMemcpyDeviceToHost);
    double d_i = 0;
    for (int c = 0; c < kDim; ++c) d_i += double(hashed_value(kDout, at(i, h, c))) * out_row[c];
    std::vector<double> dq_ref(kDim, 0.0);
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0, dp = 0;
      for (int c = 0; c < kDim; ++c) {
        s += double(hashed_value(kQ, at(i, h, c))) * hashed_value(kK, at(j, h, c));
        dp += double(hashed_value(kDout, at(i, h, c))) * hashed_value(kV, at(j, h, c));
      }
      const double ds = std::exp(scale * s - lse_i) * (dp - d_i);
      for (int c = 0; c < kDim; ++c) dq_ref[c] += scale * ds * hashed_value(kK, at(j, h, c));
    }
    const std::vector<float> got = bf16_row(dq.ptr, at(i, h, 0), kDim);
    double worst = 0, magnitude = 1e-3;
    for (int c = 0; c < kDim; ++c) {
      worst = std::max(worst, std::fabs(got[c] - dq_ref[c]));
      magnitude = std::max(magnitude, std::fabs(dq_ref[c]));
    }
    EXPECT_LE(worst, 3e-2 * magnitude + 1e-3) << "dq row " << i;
  }
}

// A paged cache of 8448 pages of 256 positions x 8 KV heads x 128: 2.2e9 elements per
// cache. Four sequences of 540,000 cached keys each, one query row, 32 query heads.
TEST(CudaLarge, DISABLED_PagedKVCachePast2To31Elements) {
  constexpr int64_t kPages = 8448, kPage = 256, kHeadsK = 8, kQHeads = 32, kBatch = 4;
  constexpr int64_t kPagesPerSeq = kPages / kBatch, kCached = 540000;
  const uint64_t count = uint64_t(kPages) * kPage * kHeadsK * kDim;
  ASSERT_GT(count, uint64_t{1} << 31);
  if (!has_gpu_memory(2 * count * 2 + (size_t{1} << 30))) {
    GTEST_SKIP() << "needs a GPU with about 10 GB free";
  }
  DeviceBuffer k_cache(count * 2), v_cache(count * 2);
  DeviceBuffer q(kBatch * kQHeads * kDim * 2), out(kBatch * kQHeads * kDim * 2);
  DeviceBuffer table(kBatch * kPagesPerSeq * 4), seqlens(kBatch * 4);
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(k_cache.ptr), count, kK);
  fill_hashed<<<4096, 256>>>(static_cast<__nv_bfloat16*>(v_cache.ptr), count, kV);
  fill_hashed<<<64, 256>>>(static_cast<__nv_bfloat16*>(q.ptr), kBatch * kQHeads * kDim, kQ);
  // Sequence b takes pages in reverse, interleaved with the others: the last pages of the
  // cache (offsets past 2^31 elements) are read by every sequence.
  std::vector<int32_t> block_table(kBatch * kPagesPerSeq);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t j = 0; j < kPagesPerSeq; ++j) {
      block_table[b * kPagesPerSeq + j] = static_cast<int32_t>(kPages - 1 - (j * kBatch + b));
    }
  }
  const std::vector<int32_t> cached(kBatch, static_cast<int32_t>(kCached));
  cudaMemcpy(table.ptr, block_table.data(), block_table.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(seqlens.ptr, cached.data(), cached.size() * 4, cudaMemcpyHostToDevice);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  flashattn::KVCacheArgs a;
  a.q = device_tensor(q.ptr, DType::kBF16, {kBatch, 1, kQHeads, kDim});
  a.k_cache = device_tensor(k_cache.ptr, DType::kBF16, {kPages, kPage, kHeadsK, kDim});
  a.v_cache = device_tensor(v_cache.ptr, DType::kBF16, {kPages, kPage, kHeadsK, kDim});
  a.block_table = device_tensor(table.ptr, DType::kI32, {kBatch, kPagesPerSeq});
  a.cache_seqlens = device_tensor(seqlens.ptr, DType::kI32, {kBatch});
  a.out = device_tensor(out.ptr, DType::kBF16, {kBatch, 1, kQHeads, kDim});
  a.options.causal = true;
  size_t workspace_bytes = 0;
  flashattn::Status status =
      flashattn::workspace_size(a, flashattn::Backend::kCuda, &workspace_bytes);
  ASSERT_TRUE(status.ok()) << status.message();
  DeviceBuffer workspace(workspace_bytes);
  status = flashattn::forward_kvcache(
      a, {flashattn::Backend::kCuda, nullptr, workspace.ptr, workspace_bytes});
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const double scale = 1.0 / std::sqrt(double(kDim));
  const auto cache_index = [&](int64_t b, int64_t position, int64_t hk, int c) {
    const int64_t page = block_table[b * kPagesPerSeq + position / kPage];
    return ((uint64_t(page) * kPage + position % kPage) * kHeadsK + hk) * kDim + c;
  };
  for (int64_t b : {int64_t{0}, kBatch - 1}) {
    for (int64_t h : {int64_t{0}, kQHeads - 1}) {
      const int64_t hk = h / (kQHeads / kHeadsK);
      std::vector<double> scores(kCached);
      double top = -INFINITY;
      for (int64_t j = 0; j < kCached; ++j) {
        double s = 0;
        for (int c = 0; c < kDim; ++c) {
          s += double(hashed_value(kQ, (b * kQHeads + h) * kDim + c)) *
               hashed_value(kK, cache_index(b, j, hk, c));
        }
        scores[j] = scale * s;
        top = std::max(top, scores[j]);
      }
      double sum = 0;
      for (double s : scores) sum += std::exp(s - top);
      std::vector<double> expected(kDim, 0.0);
      for (int64_t j = 0; j < kCached; ++j) {
        const double p = std::exp(scores[j] - top) / sum;
        for (int c = 0; c < kDim; ++c)
          expected[c] += p * hashed_value(kV, cache_index(b, j, hk, c));
      }
      const std::vector<float> got = bf16_row(out.ptr, (b * kQHeads + h) * kDim, kDim);
      double worst = 0, magnitude = 1e-3;
      for (int c = 0; c < kDim; ++c) {
        worst = std::max(worst, std::fabs(got[c] - expected[c]));
        magnitude = std::max(magnitude, std::fabs(expected[c]));
      }
      EXPECT_LE(worst, 2e-2 * magnitude + 1e-3) << "batch " << b << " head " << h;
    }
  }
}

}  // namespace
