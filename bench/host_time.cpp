#include "host_time.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace fa_bench {
namespace {

constexpr int kHostTimeRounds = 5;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Microseconds per iteration of `body` over `calls` iterations, then `finish` (inside the
// timed span: a call queued on the device is not done until the device has run it).
template <class Body, class Finish>
double per_call_us(int calls, Body body, Finish finish) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    if (!body(i)) return -1;
  }
  finish();
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / calls;
}

}  // namespace

HostTime measure_host_time(Memory& memory, int calls,
                           const std::function<flashattn::Status()>& supported,
                           const std::function<flashattn::Status(int)>& call,
                           flashattn::Status* status) {
  HostTime t;
  t.calls = calls;
  auto plan = [&](int) { return (*status = supported()).ok(); };
  auto run = [&](int i) { return (*status = call(i)).ok(); };
  auto sync = [&] { memory.synchronize(); };
  // Warm-up: the first calls of a process pay one-time costs (device queries, module loads).
  if (per_call_us(std::min(calls, 100), run, sync) < 0) return t;
  std::vector<double> plan_us, call_us;
  for (int round = 0; round < kHostTimeRounds; ++round) {
    const double p = per_call_us(calls, plan, [] {});
    const double c = per_call_us(calls, run, sync);
    if (p < 0 || c < 0) return t;
    plan_us.push_back(p);
    call_us.push_back(c);
  }
  t.ran = true;
  t.plan_us = median(plan_us);
  t.call_us = median(call_us);
  return t;
}

void print_host_time_json(const HostTime& t) {
  if (!t.ran) return;
  std::printf(", \"host_call_us\": %.3f, \"host_plan_us\": %.3f, \"host_time_calls\": %d",
              t.call_us, t.plan_us, t.calls);
}

}  // namespace fa_bench
