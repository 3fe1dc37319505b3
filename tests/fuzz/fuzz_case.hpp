// One fuzz input: a call (forward, backward or KV cache, through the C++ API or the C ABI)
// described by small integers, so it can be written to one line of the corpus and read
// back. A case is a plausible call (sizes, layout, options) plus up to a few mutations
// that try to break it: a wrong dtype or enum value, a null pointer, a negative or zero
// stride, a size of 0 or 2^31 or more, a wrong rank, an option at or past its edge,
// offsets that go backwards, indices outside the cache.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fa_fuzz {

enum class Entry { kForward = 0, kBackward = 1, kKVCache = 2 };

// The tensors of a call, as mutation targets.
enum Slot : int {
  kQ, kK, kV, kOut, kLse, kDout, kDq, kDk, kDv,           // attention (k, v: the caches)
  kCuQ, kCuK, kUsedK, kAlibi,                              // varlen and options
  kCacheSeqlens, kKNew, kVNew, kBlockTable, kBatchIdx, kLeftpad, kRotaryCos, kRotarySin,
  kQDescale, kKDescale, kVDescale,                        // FP8 (descale.q, .k, .v)
  kSlotCount
};
const char* slot_name(Slot slot, Entry entry);

enum class MutationKind : int {
  kDtype,        // slot's dtype := value (any int32, invalid enum values included)
  kNull,         // slot's data := nullptr
  kStride,       // slot's stride[dim] := value
  kSize,         // slot's shape[dim] := value
  kRank,         // slot's rank := value
  kDevice,       // slot's device type := value
  kContent,      // element [dim] of an index slot := value
  kOption,       // option `dim` := value (see fuzz_instance.cpp)
  kCount
};

struct Mutation {
  MutationKind kind = MutationKind::kDtype;
  int slot = 0;
  int dim = 0;
  int64_t value = 0;
};

// Every field is an integer, written by name in the corpus.
struct Case {
  int entry = 0;  // Entry
  int c_abi = 0;  // 1: through fa_forward & co.
  int dtype = 0;  // 0 fp32, 1 fp16, 2 bf16
  int batch = 1;
  int seqlen_q = 1;
  int seqlen_k = 1;
  int nheads_k = 1;
  int group = 1;  // nheads = group * nheads_k
  int head_dim = 16;
  int padded = 0;  // 1: q, k, v and the outputs are views with padded head strides
  int varlen = 0;  // forward/backward: packed layout, lengths from the seed
  int seqused = 0;
  int causal = 0;
  int window_left = -1;
  int window_right = -1;
  int softcap = 0;  // x 0.1
  int alibi = 0;
  int dropout = 0;  // percent
  // 1: dropout's (seed, offset) through options.dropout_seed_offset (memory the fuzzer owns),
  // with other values in the dropout_seed / dropout_offset fields.
  int seed_in_memory = 0;
  int scale = -1;   // -1: unset; else x 0.01
  int lse = 1;
  // KV cache
  int capacity = 32;
  int page_size = 0;
  int batch_idx = 0;
  int leftpad = 0;
  int seqlen_new = 0;
  int rotary_dim = 0;
  int num_splits = 0;
  // Inputs: 0 random, 1 NaN in v, 2 NaN in k, 3 +inf in v, 4 NaN in q.
  int poison = 0;
  uint32_t seed = 1;  // of the input values, lengths and indices
  std::vector<Mutation> mutations;
};

// A random case: valid about half of the time.
Case random_case(std::mt19937_64& rng);

std::string to_line(const Case& c);
// false when the line is not a case (comments and blank lines are skipped by the caller).
bool from_line(const std::string& line, Case* c, std::string* error);

}  // namespace fa_fuzz
