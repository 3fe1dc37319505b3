// Host time per call (--host-time N): what the library itself costs the calling thread, for
// the small calls of a decoding loop or a small model, where the host is the bottleneck.
#pragma once

#include <functional>

#include "flashattn/flashattn.hpp"
#include "memory.hpp"

namespace fa_bench {

struct HostTime {
  bool ran = false;
  int calls = 0;        // per round; the medians of kHostTimeRounds rounds
  double plan_us = 0;   // flashattn::supported(): validation and the backend's plan
  double call_us = 0;   // the whole call, `calls` issued back to back, one sync after
};

// `supported` validates and plans the call without running it; `call(i)` runs it on buffer
// set i. Stops at the first failure and reports it in `status`.
HostTime measure_host_time(Memory& memory, int calls,
                           const std::function<flashattn::Status()>& supported,
                           const std::function<flashattn::Status(int)>& call,
                           flashattn::Status* status);

// The JSON fields of a measurement that ran (", \"host_call_us\": ..."), for the line being
// printed; nothing when it did not.
void print_host_time_json(const HostTime& t);

}  // namespace fa_bench
