// Command-line options of flashattn-bench: one attention problem and how to run it.
#pragma once

#include <string>

#include "flashattn/flashattn.hpp"

namespace fa_bench {

enum class Direction { kForward, kBackward };
// attention: forward/backward on fresh q, k, v. decode: forward_kvcache over a cache of
// --cache-len keys per entry (seqlen_q 1 unless given), timed with K/V bandwidth.
enum class Mode { kAttention, kDecode };

struct Options {
  flashattn::Backend backend = flashattn::Backend::kAuto;
  int batch = 2;
  int heads = 8;
  int heads_k = 0;  // 0: same as heads
  int seqlen_q = 1024;
  int seqlen_k = 0;  // 0: same as seqlen_q
  int hdim = 64;
  std::string dtype = "auto";  // auto: bf16 on the GPU, fp32 on the CPU
  bool causal = false;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
  float dropout_p = 0.f;  // seed and offset fixed: every iteration drops the same elements
  Direction direction = Direction::kForward;
  bool check = false;
  bool json = false;
  int warmup = -1;  // -1: a default per backend
  int iters = -1;
  int host_time_calls = 0;  // > 0: also the host time per call over that many calls

  Mode mode = Mode::kAttention;
  bool seqlen_q_given = false;
  int cache_len = 4096;  // decode: keys cached per batch entry (the cache is that long)
  int page_size = 0;     // decode: > 0 pages the cache through a block table
  int num_splits = 0;    // decode: 0 lets the library pick, 1 = no split
  // decode: false stores a cache (or page) row by row, [.., keys, heads_k, d] (FlashAttention's
  // layout); true head by head, [.., heads_k, keys, d] (each head's keys contiguous, the layout
  // the SDPA peers read), passed as a strided view of the same logical shape.
  bool heads_major = false;
  bool pages_in_order = false;  // decode: block table 0, 1, 2, ... instead of shuffled
  // decode: an e4m3 (FP8) cache read through descales [batch, heads_k], instead of one in
  // q's dtype
  bool e4m3_cache = false;
};

// Parses argv; on error or --help returns false with the text to print in `message`.
bool parse_options(int argc, char** argv, Options* options, std::string* message);

const char* usage();

}  // namespace fa_bench
