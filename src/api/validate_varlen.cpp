// The packed variable-length layout: cu_seqlens_q / cu_seqlens_k / seqused_k.
#include "api/validate_parts.hpp"

namespace flashattn::api {
namespace {

const char* const kCuQ = "varlen.cu_seqlens_q";
const char* const kCuK = "varlen.cu_seqlens_k";
const char* const kUsedK = "varlen.seqused_k";

std::string entry(int64_t i) { return "[" + std::to_string(i) + "]"; }

// Offsets of one side: starting at 0, non-decreasing, ending at the rows of the packed
// tensor, no sequence longer than max_seqlen.
Status check_offsets(const Tensor& cu, const char* name, int64_t rows, const char* rows_name,
                     int max_seqlen, const char* max_name) {
  const int64_t batch = cu.shape[0] - 1;
  if (host_int(cu, 0) != 0) return invalid(name, "entry [0] = 0", std::to_string(host_int(cu, 0)));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t begin = host_int(cu, b), end = host_int(cu, b + 1);
    if (end < begin) {
      return invalid(name, "non-decreasing entries",
                     entry(b) + "=" + std::to_string(begin) + " > " + entry(b + 1) + "=" +
                         std::to_string(end));
    }
    if (end - begin > max_seqlen) {
      return invalid(max_name,
                     "at least every sequence length (sequence " + std::to_string(b) + " has " +
                         std::to_string(end - begin) + ")",
                     std::to_string(max_seqlen));
    }
  }
  const int64_t last = host_int(cu, batch);
  if (last != rows) {
    return invalid(name,
                   "last entry " + entry(batch) + " = " + rows_name + "=" + std::to_string(rows),
                   std::to_string(last));
  }
  return Status::Ok();
}

bool on_host(const Tensor& t) { return t.device.type == DeviceType::kCPU; }

}  // namespace

Status check_varlen_structure(const VarlenLayout& varlen, int64_t* batch) {
  FA_RETURN_IF_ERROR(expect_present(varlen.cu_seqlens_q, kCuQ, "int32 [batch + 1]"));
  FA_RETURN_IF_ERROR(expect_rank(varlen.cu_seqlens_q, kCuQ, 1, "[batch + 1]"));
  FA_RETURN_IF_ERROR(check_storage(varlen.cu_seqlens_q, kCuQ));
  FA_RETURN_IF_ERROR(expect_dtype(varlen.cu_seqlens_q, kCuQ, DType::kI32));
  if (varlen.cu_seqlens_q.shape[0] < 1) {
    return invalid(kCuQ, "length batch + 1 >= 1", std::to_string(varlen.cu_seqlens_q.shape[0]));
  }
  *batch = varlen.cu_seqlens_q.shape[0] - 1;
  FA_RETURN_IF_ERROR(
      expect_tensor(varlen.cu_seqlens_k, kCuK, DType::kI32, {{*batch + 1, "batch+1"}}));
  FA_RETURN_IF_ERROR(
      expect_optional_tensor(varlen.seqused_k, kUsedK, DType::kI32, {{*batch, "batch"}}));
  if (varlen.max_seqlen_q < 0) {
    return invalid("varlen.max_seqlen_q", ">= 0", std::to_string(varlen.max_seqlen_q));
  }
  if (varlen.max_seqlen_k < 0) {
    return invalid("varlen.max_seqlen_k", ">= 0", std::to_string(varlen.max_seqlen_k));
  }
  return Status::Ok();
}

Status check_dense_has_no_varlen(const VarlenLayout& varlen) {
  if (varlen.cu_seqlens_k.present()) {
    return invalid(kCuQ, "a tensor, since varlen.cu_seqlens_k is given (varlen layout)", "none");
  }
  if (varlen.seqused_k.present()) {
    return invalid(kCuQ, "a tensor, since varlen.seqused_k is given (varlen layout)", "none");
  }
  return Status::Ok();
}

// Device-resident offsets cannot be read without a copy and a synchronization, which the
// library never does on the launch path (docs/design.md: nothing synchronizes): for those only the
// length and dtype above are checked, and the kernels trust the contents.
Status check_varlen_contents(const VarlenLayout& varlen, const Sizes& sizes) {
  if (on_host(varlen.cu_seqlens_q)) {
    FA_RETURN_IF_ERROR(check_offsets(varlen.cu_seqlens_q, kCuQ, sizes.rows_q, "total_q",
                                     varlen.max_seqlen_q, "varlen.max_seqlen_q"));
  }
  if (on_host(varlen.cu_seqlens_k)) {
    FA_RETURN_IF_ERROR(check_offsets(varlen.cu_seqlens_k, kCuK, sizes.rows_k, "total_k",
                                     varlen.max_seqlen_k, "varlen.max_seqlen_k"));
  }
  if (varlen.seqused_k.present() && on_host(varlen.seqused_k) && on_host(varlen.cu_seqlens_k)) {
    for (int64_t b = 0; b < sizes.batch; ++b) {
      const int64_t keys = host_int(varlen.cu_seqlens_k, b + 1) - host_int(varlen.cu_seqlens_k, b);
      const int64_t used = host_int(varlen.seqused_k, b);
      if (used < 0 || used > keys) {
        return invalid(kUsedK,
                       entry(b) + " in 0.." + std::to_string(keys) + " (the keys of sequence " +
                           std::to_string(b) + ")",
                       std::to_string(used));
      }
    }
  }
  return Status::Ok();
}

}  // namespace flashattn::api
