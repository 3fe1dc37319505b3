#include "api/checks.hpp"

#include <cstdio>
#include <limits>

namespace flashattn::api {
namespace {

constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

std::string list_text(const int64_t* values, int count) {
  std::string text = "[";
  for (int d = 0; d < count; ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(values[d]);
  }
  return text + "]";
}

// The largest element offset the view can reach, or false when it does not fit int64.
bool largest_offset(const Tensor& t, int64_t* offset) {
  int64_t total = 0;
  for (int d = 0; d < t.rank; ++d) {
    int64_t term = 0;
    if (__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &term)) return false;
    if (__builtin_add_overflow(total, term, &total)) return false;
  }
  *offset = total;
  return true;
}

}  // namespace

Status invalid(const std::string& name, const std::string& expected, const std::string& got) {
  return Status(StatusCode::kInvalidArgument, name + ": expected " + expected + ", got " + got);
}

Status unsupported(const std::string& name, const std::string& reason) {
  return Status(StatusCode::kUnsupported, name + ": " + reason);
}

std::string to_text(Device device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  if (device.type == DeviceType::kCUDA) return "cuda:" + std::to_string(device.index);
  return "unknown device type " + std::to_string(static_cast<int>(device.type));
}

std::string to_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// A rank outside 0..kMaxRank is reported by check_storage; never read past the arrays.
std::string shape_text(const Tensor& t) {
  return list_text(t.shape, t.rank < 0 ? 0 : t.rank > kMaxRank ? kMaxRank : t.rank);
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) text += ", ";
    text += std::string(shape[d].name) + "=" + std::to_string(shape[d].size);
  }
  return text + "]";
}

Status check_storage(const Tensor& t, const char* name) {
  if (t.rank < 1 || t.rank > kMaxRank) {
    return invalid(name, "rank 1.." + std::to_string(kMaxRank), "rank " + std::to_string(t.rank));
  }
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) return invalid(name, "sizes >= 0", "shape " + shape_text(t));
    if (t.shape[d] > kMaxSize) {
      return invalid(name, "every size <= 2^31-1 (sizes are int32)", "shape " + shape_text(t));
    }
    if (t.stride[d] < 0) {
      return invalid(name, "strides >= 0", "strides " + list_text(t.stride, t.rank));
    }
  }
  const int last = t.rank - 1;
  if (t.shape[last] > 1 && t.stride[last] != 1) {
    return invalid(name, "last dimension contiguous (stride 1)",
                   "stride " + std::to_string(t.stride[last]));
  }
  // Not numel(): the product of four int32 sizes can overflow int64.
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] == 0) return Status::Ok();  // empty: nothing is ever read or written
  }
  if (t.data == nullptr) {
    return invalid(name, "a non-null data pointer for shape " + shape_text(t), "nullptr");
  }
  int64_t offset = 0, elements = 0, bytes = 0;
  if (!largest_offset(t, &offset) || __builtin_add_overflow(offset, 1, &elements) ||
      __builtin_mul_overflow(elements, static_cast<int64_t>(dtype_size(t.dtype)), &bytes)) {
    return invalid(name, "strides whose largest offset fits int64",
                   "shape " + shape_text(t) + " with strides " + list_text(t.stride, t.rank));
  }
  return Status::Ok();
}

Status expect_present(const Tensor& t, const char* name, const char* layout) {
  if (t.present()) return Status::Ok();
  return invalid(name, std::string("a tensor ") + layout, "none");
}

Status expect_dtype(const Tensor& t, const char* name, DType dtype) {
  if (t.dtype == dtype) return Status::Ok();
  return invalid(name, std::string("dtype ") + to_string(dtype), to_string(t.dtype));
}

Status expect_float_dtype(const Tensor& t, const char* name) {
  if (t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16) {
    return Status::Ok();
  }
  return invalid(name, "dtype fp32, fp16 or bf16", to_string(t.dtype));
}

Status expect_rank(const Tensor& t, const char* name, int rank, const char* layout) {
  if (t.rank == rank) return Status::Ok();
  return invalid(name, "rank " + std::to_string(rank) + " " + layout,
                 "rank " + std::to_string(t.rank) + " " + shape_text(t));
}

Status expect_shape(const Tensor& t, const char* name, const Shape& shape) {
  bool same = t.rank == static_cast<int>(shape.size());
  for (int d = 0; same && d < t.rank; ++d) same = t.shape[d] == shape[d].size;
  if (same) return Status::Ok();
  return invalid(name, "shape " + shape_text(shape), shape_text(t));
}

Status expect_tensor(const Tensor& t, const char* name, DType dtype, const Shape& shape) {
  // The expected shape is spelled out only for the message: most calls pass.
  if (!t.present()) return expect_present(t, name, shape_text(shape).c_str());
  // A wrong rank first: a view of the wrong rank usually fails the other checks too.
  if (t.rank != static_cast<int>(shape.size())) return expect_shape(t, name, shape);
  FA_RETURN_IF_ERROR(check_storage(t, name));
  FA_RETURN_IF_ERROR(expect_dtype(t, name, dtype));
  return expect_shape(t, name, shape);
}

Status expect_optional_tensor(const Tensor& t, const char* name, DType dtype, const Shape& shape) {
  if (!t.present()) return Status::Ok();
  return expect_tensor(t, name, dtype, shape);
}

Status expect_pair(const Tensor& first, const char* first_name, const Tensor& second,
                   const char* second_name) {
  if (first.present() == second.present()) return Status::Ok();
  if (first.present()) {
    return invalid(second_name, std::string("a tensor, since ") + first_name + " is given", "none");
  }
  return invalid(first_name, std::string("a tensor, since ") + second_name + " is given", "none");
}

core::Operand operand_of(const Tensor& t) {
  core::Operand op;
  op.ptr = t.data;
  // An empty view is never read or written, and check_storage does not bound its strides:
  // the backends get zero strides for it, so that no offset they derive from it (a base per
  // batch entry or KV head of k with no keys, say) can overflow.
  for (int d = 0; d < t.rank && d < kMaxRank; ++d) {
    if (t.shape[d] == 0) return op;
  }
  if (t.rank == 4) {
    op.batch_stride = t.stride[0];
    op.row_stride = t.stride[1];
    op.head_stride = t.stride[2];
  } else if (t.rank == 3) {
    op.row_stride = t.stride[0];
    op.head_stride = t.stride[1];
  }
  return op;
}

int32_t host_int(const Tensor& t, int64_t i, int64_t j) {
  const int64_t offset = i * t.stride[0] + (t.rank > 1 ? j * t.stride[1] : 0);
  return static_cast<const int32_t*>(t.data)[offset];
}

}  // namespace flashattn::api
