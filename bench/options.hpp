// Command-line options of flashattn-bench: one attention problem and how to run it.
#pragma once

#include <string>

#include "flashattn/flashattn.hpp"

namespace fa_bench {

enum class Direction { kForward, kBackward };

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
};

// Parses argv; on error or --help returns false with the text to print in `message`.
bool parse_options(int argc, char** argv, Options* options, std::string* message);

const char* usage();

}  // namespace fa_bench
