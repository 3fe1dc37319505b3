// --check: the same inputs through the reference (fp64 accumulation, fp32 inputs holding
// the benchmark's values exactly), compared element by element with the benchmarked run.
#pragma once

#include <string>

#include "memory.hpp"
#include "options.hpp"
#include "problem.hpp"

namespace fa_bench {

struct CheckResult {
  bool ran = false;
  double max_abs_err = 0;  // max |backend - reference| over out (fwd) or dq, dk, dv (bwd)
  double max_ref = 0;      // max |reference| over the same tensors
  std::string error;       // set when the check could not run
};

CheckResult check_against_reference(Memory& memory, const Options& options,
                                    const HostInputs& inputs, const BufferSet& set);

}  // namespace fa_bench
