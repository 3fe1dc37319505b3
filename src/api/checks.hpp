// The vocabulary validation is written in: each helper checks one property of one
// argument and, on failure, returns the standard message
//   "<argument>: expected <what docs/contract.md requires>, got <what the call passed>".
// Keeping the wording in one place is what makes every error look the same.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/params.hpp"
#include "flashattn/flashattn.hpp"

#define FA_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::flashattn::Status fa_status_ = (expr); \
    if (!fa_status_.ok()) return fa_status_; \
  } while (0)

namespace flashattn::api {

// kInvalidArgument "<name>: expected <expected>, got <got>".
Status invalid(const std::string& name, const std::string& expected, const std::string& got);
// kUnsupported "<name>: <reason>": a valid call this backend/build cannot run.
Status unsupported(const std::string& name, const std::string& reason);

std::string to_text(Device device);       // "cpu", "cuda:1"
std::string to_text(double value);        // shortest readable form: "0.1", "nan", "-inf"
std::string shape_text(const Tensor& t);  // "[2, 128, 8, 64]"

// One expected dimension, named so the message says which size was wrong.
struct Dim {
  int64_t size = 0;
  const char* name = "";
};

// An expected shape: at most kMaxRank dimensions, held inline, since validation builds
// several for every call and a heap allocation each was a large share of its host time.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<Dim> dims) {
    for (const Dim& dim : dims) push_back(dim);
  }
  void push_back(Dim dim) {
    assert(size_ < kMaxRank && "an expected shape has at most kMaxRank dimensions");
    dims_[size_++] = dim;
  }
  size_t size() const { return size_; }
  const Dim& operator[](size_t d) const { return dims_[d]; }

 private:
  Dim dims_[kMaxRank];
  size_t size_ = 0;
};
std::string shape_text(const Shape& shape);  // "[batch=2, seqlen_k=128, ...]"

// What every present tensor must satisfy whatever its role: rank 1..4, sizes and strides
// >= 0, each size within int32, the last dimension contiguous, a non-null pointer unless
// the tensor is empty, and every reachable offset (in elements and in bytes) within int64.
Status check_storage(const Tensor& t, const char* name);

// A required argument: present, sound storage, the dtype and the exact shape.
Status expect_tensor(const Tensor& t, const char* name, DType dtype, const Shape& shape);
// The same for an optional argument; an absent one passes.
Status expect_optional_tensor(const Tensor& t, const char* name, DType dtype, const Shape& shape);

// Pieces of the above, for arguments whose sizes are read from themselves (q, k, caches).
Status expect_present(const Tensor& t, const char* name, const char* layout);
Status expect_dtype(const Tensor& t, const char* name, DType dtype);
Status expect_rank(const Tensor& t, const char* name, int rank, const char* layout);
Status expect_shape(const Tensor& t, const char* name, const Shape& shape);
// q's dtype: one of the attention element types (fp32, fp16, bf16).
Status expect_float_dtype(const Tensor& t, const char* name);

// Both of a pair or neither (k_new/v_new, rotary_cos/rotary_sin).
Status expect_pair(const Tensor& first, const char* first_name, const Tensor& second,
                   const char* second_name);

// A [batch, rows, heads, dim] view (rank 4) or a packed varlen [rows, heads, dim] view
// (rank 3) as the backends read it.
core::Operand operand_of(const Tensor& t);

// Element [i] of a host int32 vector, or [i, j] of a host int32 matrix, through its strides.
int32_t host_int(const Tensor& t, int64_t i, int64_t j = 0);

}  // namespace flashattn::api
