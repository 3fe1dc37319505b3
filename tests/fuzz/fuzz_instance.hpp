// A case made real: buffers for every tensor it describes (guard bytes around each, gaps
// of strided views filled with a canary), values drawn from the case's seed, and the
// public-API arguments over them with the case's mutations applied. Materializing a case
// twice gives the same inputs, so the backend under test and the references each get a
// fresh, identical copy.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "fuzz_case.hpp"

namespace fa_fuzz {

struct Buffer {
  std::vector<uint8_t> bytes;  // guard, then the tensor's span, then guard
  bool output = false;         // written by a successful call (caches: updated in place)
};

constexpr size_t kGuardBytes = 64;
constexpr uint8_t kGuardByte = 0xCD;

struct Instance {
  Entry entry = Entry::kForward;
  flashattn::ForwardArgs forward;
  flashattn::BackwardArgs backward;
  flashattn::KVCacheArgs kvcache;
  flashattn::Launch launch;
  std::array<Buffer, kSlotCount> buffers;
  // Every tensor the call describes is backed by memory covering its view; when not (a
  // size mutated past what the fuzzer allocates), only validation may be asked.
  bool backed = true;
  // An index tensor (whose contents validation reads) too large to allocate: the case is
  // not run at all, since its reads would be the fuzzer's own bug.
  bool index_unbacked = false;
  // Dropout's (seed, offset) for options.dropout_seed_offset, on the heap so that the address
  // survives copies and moves of the Instance.
  std::shared_ptr<std::array<uint64_t, 2>> seed_offset;

  flashattn::Tensor* slot(Slot s);  // the slot's Tensor in the entry's arguments
  const flashattn::Tensor* slot(Slot s) const;
  // Whole bytes of every buffer, to compare before and after a call.
  std::vector<std::vector<uint8_t>> snapshot() const;
};

// Builds the call described by `c` (mutations included) with Launch::backend = backend.
// Backward inputs out and lse come from the exact reference's forward when that forward
// is valid.
Instance materialize(const Case& c, flashattn::Backend backend);

// Offsets (in elements) of every logical element of a view, in row-major order; empty for
// a view that addresses nothing or whose rank is outside 1..4.
std::vector<int64_t> element_offsets(const flashattn::Tensor& t);

}  // namespace fa_fuzz
