// Host side of the TMA loads (tma_load.cuh): tensor maps of 16-bit (or 8-bit) elements cut
// into [box_rows][64] (or [box_rows][128]) boxes, 128 bytes wide, with the 128-byte swizzle,
// i.e. into the panels of a Swizzle128Tile<box_rows, ..., elem_bytes>. cuTensorMapEncodeTiled is a driver function: it is found
// through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
//
// Two shapes: a plain row-major matrix (encode_panel_tensor_map), and an attention operand
// [batch][rows][heads][cols] with any strides (encode_operand_tensor_map), whose dimensions
// are given innermost first as (col, row, head, batch). Elements outside the dimensions read
// as zero, which is what makes a tile that runs past the end of a sequence safe.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/params.hpp"

namespace flashattn::cuda::sm90 {
namespace detail {

// cuTensorMapEncodeTiled for `rank` dimensions (sizes innermost first, strides in bytes of
// every dimension but the first) with boxes of 128 bytes (64 or 128 elements of elem_bytes)
// by box_rows by box_depth (1 in the dimensions past the third), which land as box_rows *
// box_depth lines of 128 bytes. Empty on success, else what is wrong.
inline std::string encode_swizzled_boxes(CUtensorMap* map, const void* base, int rank,
                                         const cuuint64_t* dims, const cuuint64_t* strides,
                                         uint32_t box_rows, uint32_t box_depth, int elem_bytes) {
  // TMA's own limits: 16-byte aligned base and strides, boxes of at most 256 rows.
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "base is not 16-byte aligned";
  for (int i = 0; i + 1 < rank; ++i) {
    if (strides[i] % 16 != 0) return "a stride is not a multiple of 16 bytes";
    if (strides[i] >= (uint64_t{1} << 40)) return "a stride is 2^40 bytes or more";
  }
  if (box_rows == 0 || box_rows > 256) return "box_rows must be in 1..256";
  if (box_depth == 0 || box_depth > 256) return "box_depth must be in 1..256";

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
  // 128 bytes across: the 128-byte swizzle's line.
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows, box_depth, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result = reinterpret_cast<Encode>(entry)(
      map, elem_bytes == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_UINT16,
      static_cast<cuuint32_t>(rank), const_cast<void*>(base),
      dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) return "cuTensorMapEncodeTiled failed: " + std::to_string(result);
  return {};
}

}  // namespace detail

// The matrix at device address `base`, `rows` x `cols` elements, rows `row_stride` elements
// apart, in [box_rows][64] boxes.
inline std::string encode_panel_tensor_map(CUtensorMap* map, const void* base, uint64_t rows,
                                           uint64_t cols, uint64_t row_stride, uint32_t box_rows) {
  if (cols < 64 || row_stride < cols) return "cols must be at least 64 and at most row_stride";
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride * 2};
  return detail::encode_swizzled_boxes(map, base, 2, dims, strides, box_rows, 1, 2);
}

// Sizes and element strides of an attention operand, as the kernel addresses it: element
// (col, row, head, batch) is at base + row * row_stride + head * head_stride + batch *
// batch_stride. A varlen operand is one "batch" entry of all its rows. Elements of elem_bytes
// bytes: 2, or 1 for e4m3.
struct OperandExtent {
  uint64_t cols, rows, heads, batch;
  int64_t row_stride, head_stride, batch_stride;
  int elem_bytes = 2;
};

// The operand (q) in boxes of `group` heads by `queries` rows at coordinates (col, head, row,
// batch): box row r is head r % group of query r / group, the packed-GQA rows of a tile
// (fwd_scheduler.cuh).
inline std::string encode_packed_heads_tensor_map(CUtensorMap* map, const void* base,
                                                  const OperandExtent& e, uint32_t group,
                                                  uint32_t queries) {
  if (e.row_stride <= 0 || e.head_stride <= 0 || e.batch_stride <= 0) {
    return "strides must be positive";
  }
  const cuuint64_t dims[4] = {e.cols, e.heads, e.rows, e.batch};
  const cuuint64_t bytes = static_cast<cuuint64_t>(e.elem_bytes);
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(e.head_stride) * bytes,
                                 static_cast<cuuint64_t>(e.row_stride) * bytes,
                                 static_cast<cuuint64_t>(e.batch_stride) * bytes};
  return detail::encode_swizzled_boxes(map, base, 4, dims, strides, group, queries, e.elem_bytes);
}

// The operand in [box_rows][128 bytes] boxes at coordinates (col, row, head, batch).
inline std::string encode_operand_tensor_map(CUtensorMap* map, const void* base,
                                             const OperandExtent& e, uint32_t box_rows) {
  if (e.row_stride <= 0 || e.head_stride <= 0 || e.batch_stride <= 0) {
    return "strides must be positive";
  }
  const cuuint64_t dims[4] = {e.cols, e.rows, e.heads, e.batch};
  const cuuint64_t bytes = static_cast<cuuint64_t>(e.elem_bytes);
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(e.row_stride) * bytes,
                                 static_cast<cuuint64_t>(e.head_stride) * bytes,
                                 static_cast<cuuint64_t>(e.batch_stride) * bytes};
  return detail::encode_swizzled_boxes(map, base, 4, dims, strides, box_rows, 1, e.elem_bytes);
}

// The extent of a [batch][rows][heads][cols] operand of elem_bytes elements as its map sees
// it: a varlen operand is one batch entry of all its rows. Strides of dimensions of one entry
// are never used; they get a valid value (16 elements: a multiple of 16 bytes).
inline OperandExtent operand_extent(const core::AttentionParams& p, const core::Operand& op,
                                    int rows, int heads, int cols, int elem_bytes = 2) {
  const bool varlen = p.is_varlen();
  OperandExtent e;
  e.cols = static_cast<uint64_t>(cols);
  e.rows = static_cast<uint64_t>(rows > 0 ? rows : 1);  // no rows: no tile loads any
  e.heads = static_cast<uint64_t>(heads);
  e.batch = varlen ? 1 : static_cast<uint64_t>(p.batch);
  e.row_stride = op.row_stride;
  e.head_stride = heads == 1 ? 16 : op.head_stride;
  e.batch_stride = (varlen || p.batch == 1) ? 16 : op.batch_stride;
  e.elem_bytes = elem_bytes;
  return e;
}

}  // namespace flashattn::cuda::sm90
