// flashattn-fuzz: random calls through the C++ API and the C ABI on the CPU backend,
// checked as fuzz_check.hpp says, for a bounded time; or the replay of a corpus file.
//
//   flashattn-fuzz [--seconds N] [--cases N] [--seed S]   fuzz; print how many cases ran
//   flashattn-fuzz --replay FILE                          run every case of FILE
//
// A failing case is printed as one line (fuzz_case.hpp's format): append it to
// tests/fuzz/corpus.txt with a comment saying what it found, and it is replayed by ctest
// from then on.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "fuzz_case.hpp"
#include "fuzz_check.hpp"

namespace {

using fa_fuzz::Case;
using fa_fuzz::Outcome;

int replay(const char* path) {
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "flashattn-fuzz: cannot read %s\n", path);
    return 2;
  }
  int passed = 0, failed = 0, line_number = 0;
  for (std::string line; std::getline(file, line);) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    Case c;
    std::string error;
    if (!fa_fuzz::from_line(line, &c, &error)) {
      std::fprintf(stderr, "%s:%d: %s\n", path, line_number, error.c_str());
      return 2;
    }
    const fa_fuzz::Result result = fa_fuzz::run_case(c);
    if (result.failure.empty()) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAILED %s:%d: %s\n", path, line_number, result.failure.c_str());
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

int fuzz(double seconds, long max_cases, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  long counts[4] = {};
  long cases = 0;
  for (; cases < max_cases; ++cases) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= seconds) break;
    const Case c = fa_fuzz::random_case(rng);
    const fa_fuzz::Result result = fa_fuzz::run_case(c);
    ++counts[static_cast<int>(result.outcome)];
    if (!result.failure.empty()) {
      std::printf("flashattn-fuzz: case %ld of seed %llu failed: %s\n%s\n", cases,
                  static_cast<unsigned long long>(seed), result.failure.c_str(),
                  fa_fuzz::to_line(c).c_str());
      return 1;
    }
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "flashattn-fuzz: %ld inputs tried in %.0f s (seed %llu): %ld accepted and checked "
      "against the reference, %ld rejected with outputs untouched, %ld validated only "
      "(too large to allocate), %ld skipped\n",
      cases, elapsed, static_cast<unsigned long long>(seed),
      counts[static_cast<int>(Outcome::kAccepted)], counts[static_cast<int>(Outcome::kRejected)],
      counts[static_cast<int>(Outcome::kValidatedOnly)],
      counts[static_cast<int>(Outcome::kSkipped)]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  long max_cases = 1L << 40;
  uint64_t seed = static_cast<uint64_t>(std::random_device{}());
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--replay") == 0 && has_value) return replay(argv[++i]);
    if (std::strcmp(argv[i], "--seconds") == 0 && has_value) {
      seconds = std::atof(argv[++i]);
    } else if (std::strcmp(argv[i], "--cases") == 0 && has_value) {
      max_cases = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: flashattn-fuzz [--seconds N] [--cases N] [--seed S] | --replay FILE\n");
      return 2;
    }
  }
  return fuzz(seconds, max_cases, seed);
}
