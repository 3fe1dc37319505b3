// Runs one fuzz case on the CPU backend and checks what the library promises:
//   - a rejected call returns kInvalidArgument or kUnsupported with a message that starts
//     with the name of an argument ("<name>: expected ..."), and no byte of any buffer
//     changed (guards and canaries included);
//   - an accepted call wrote only its outputs' elements (inputs, guard bytes and the gaps
//     of strided outputs unchanged) and agrees with the exact reference under FA2's
//     tolerance rule (max|out - ref| <= 2 max|lowp - ref| + eps), with the same elements
//     non-finite as the reference (unless an output view overlaps itself, where which
//     write lands last is not specified, or a mutated scale or softcap makes logits of
//     thousands, beyond what the rule's yardstick covers);
//   - a call too large to allocate is only validated, and must not crash.
#pragma once

#include <string>

#include "fuzz_case.hpp"

namespace fa_fuzz {

enum class Outcome { kAccepted, kRejected, kValidatedOnly, kSkipped };

struct Result {
  Outcome outcome = Outcome::kSkipped;
  std::string failure;  // empty when every check held
};

Result run_case(const Case& c);

}  // namespace fa_fuzz
