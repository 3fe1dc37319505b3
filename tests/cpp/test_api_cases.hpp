// Valid calls of every entry point over host tensors, for the API and validation tests:
// each test starts from one of these and breaks exactly one thing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "support/host_tensor.hpp"

namespace api_test {

using fa_test::HostTensor;
using flashattn::DType;

struct Problem {
  DType dtype = DType::kF32;
  int64_t batch = 2;
  int64_t seqlen_q = 5;
  int64_t seqlen_k = 7;
  int64_t nheads = 4;
  int64_t nheads_k = 2;
  int64_t head_dim = 16;
};

// The bytes of every output buffer, to prove a rejected call wrote nothing.
using Snapshot = std::vector<std::vector<uint8_t>>;

// The cases own their buffers and hand out views of them: neither copyable nor movable.
struct NoCopy {
  NoCopy() = default;
  NoCopy(const NoCopy&) = delete;
  NoCopy& operator=(const NoCopy&) = delete;
};

struct ForwardCase : NoCopy {
  explicit ForwardCase(const Problem& problem = {});
  Problem p;
  HostTensor q, k, v, out, lse;
  flashattn::ForwardArgs args;  // views of the tensors above, lse requested

  void poison_outputs();
  Snapshot outputs() const;
};

struct BackwardCase : NoCopy {
  explicit BackwardCase(const Problem& problem = {});
  Problem p;
  HostTensor dout, q, k, v, out, lse, dq, dk, dv;
  flashattn::BackwardArgs args;

  void poison_outputs();
  Snapshot outputs() const;
};

// Packed sequences of the given lengths (one entry per batch entry).
struct VarlenCase : NoCopy {
  VarlenCase(std::vector<int32_t> lengths_q, std::vector<int32_t> lengths_k,
             const Problem& problem = {});
  Problem p;
  HostTensor cu_seqlens_q, cu_seqlens_k, q, k, v, out, lse;
  flashattn::ForwardArgs args;
};

struct KVCacheShape {
  bool paged = false;
  int64_t page_size = 16;
  int64_t seqlen_cache = 32;  // per batch entry (max_pages * page_size when paged)
  int64_t seqlen_new = 2;     // 0: no k_new/v_new
  bool rotary = false;
  int64_t rotary_dim = 8;
};

struct KVCacheCase : NoCopy {
  explicit KVCacheCase(const KVCacheShape& shape = {}, const Problem& problem = {});
  Problem p;
  KVCacheShape shape;
  HostTensor q, k_cache, v_cache, cache_seqlens, k_new, v_new, block_table;
  HostTensor rotary_cos, rotary_sin, out, lse;
  flashattn::KVCacheArgs args;

  void poison_outputs();
  Snapshot outputs() const;  // out, lse and the caches (written in place when appending)
};

constexpr flashattn::StatusCode kInvalid = flashattn::StatusCode::kInvalidArgument;

// Validation alone: supported() on the reference backend runs every check of a call and
// launches nothing.
inline flashattn::Status check(const flashattn::ForwardArgs& args) {
  return flashattn::supported(args, flashattn::Backend::kReference);
}
inline flashattn::Status check(const flashattn::BackwardArgs& args) {
  return flashattn::supported(args, flashattn::Backend::kReference);
}
inline flashattn::Status check(const flashattn::KVCacheArgs& args) {
  return flashattn::supported(args, flashattn::Backend::kReference);
}

// Passes when `status` has `code` and its message starts with "<argument>:".
::testing::AssertionResult Rejected(const flashattn::Status& status, flashattn::StatusCode code,
                                    const std::string& argument);
// The same, also requiring `detail` somewhere in the message.
::testing::AssertionResult Rejected(const flashattn::Status& status, flashattn::StatusCode code,
                                    const std::string& argument, const std::string& detail);

// A tensor of the same storage declared on another device (validation never reads it).
flashattn::Tensor on_device(flashattn::Tensor t, flashattn::DeviceType type, int index = 0);

}  // namespace api_test
