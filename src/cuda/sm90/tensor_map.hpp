// Host side of the TMA loads (tma_load.cuh): the tensor map of a row-major matrix of 16-bit
// elements, cut into [box_rows][64] boxes with the 128-byte swizzle, i.e. into the panels of
// a Swizzle128Tile<box_rows, ...>. cuTensorMapEncodeTiled is a driver function: it is found
// through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace flashattn::cuda::sm90 {

// Fills `map` for the matrix at device address `base`, `rows` x `cols` elements, rows
// `row_stride` elements apart. Returns an empty string on success, else what is wrong.
inline std::string encode_panel_tensor_map(CUtensorMap* map, const void* base, uint64_t rows,
                                           uint64_t cols, uint64_t row_stride, uint32_t box_rows) {
  // TMA's own limits: 16-byte aligned base and row pitch, boxes of at most 256 rows.
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "base is not 16-byte aligned";
  if ((row_stride * 2) % 16 != 0) return "row_stride is not a multiple of 8 elements";
  if (box_rows == 0 || box_rows > 256) return "box_rows must be in 1..256";
  if (cols < 64 || row_stride < cols) return "cols must be at least 64 and at most row_stride";

  static void* const entry = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // not sticky, but leave no error behind for the caller's checks
      return static_cast<void*>(nullptr);
    }
    return fn;
  }();
  if (entry == nullptr) return "the driver has no cuTensorMapEncodeTiled";
  using Encode =
      CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  const cuuint64_t dims[2] = {cols, rows};         // innermost first
  const cuuint64_t strides[1] = {row_stride * 2};  // bytes, of every dimension but the first
  const cuuint32_t box[2] = {64, box_rows};        // 64 elements = the 128-byte swizzle span
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = reinterpret_cast<Encode>(entry)(
      map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, const_cast<void*>(base), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed: " + std::to_string(result);
  return {};
}

}  // namespace flashattn::cuda::sm90
