// flashattn-bench: times one attention problem on one backend, optionally checks it
// against the reference, and prints a readable line or one JSON object.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "check.hpp"
#include "cpu_peak.hpp"
#include "decode.hpp"
#include "host_time.hpp"
#include "cpu/backend.hpp"
#include "cpu/tiled/tiled.hpp"
#include "memory.hpp"
#include "options.hpp"
#include "problem.hpp"

namespace fa_bench {
namespace {

using flashattn::Backend;
using flashattn::DType;

struct Result {
  std::string implementation;
  std::string device;
  int buffer_sets = 1;
  std::vector<double> ms;
  double median_ms = 0;
  double tflops = 0;
  double peak_rss_mb = 0;
  double cpu_peak_gflops = 0;  // CPU runs: the measured fp32 FMA peak of the threads used
  double cpu_peak_bf16_gflops = 0;  // CPU bf16 runs: the measured bf16 peak (0: none)
  int cpu_threads = 0;
  size_t workspace_bytes = 0;
  size_t device_used_before = 0;  // CUDA: device memory in use before / after the timed calls
  size_t device_used_after = 0;
  HostTime host;
  CheckResult check;
};

DType resolve_dtype(const std::string& name, Backend backend) {
  if (name == "fp16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  if (name == "fp32") return DType::kF32;
  if (name == "e4m3") return DType::kF8E4M3;
  return backend == Backend::kCuda ? DType::kBF16 : DType::kF32;
}

std::string implementation_of(Backend backend) {
  switch (backend) {
    case Backend::kCuda: return "cuda";
    case Backend::kReference: return "reference";
    default:
      return std::string("cpu-") + flashattn::cpu::implementation() + "-" +
             flashattn::cpu::tiled::isa_name();
  }
}

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // ru_maxrss is in KiB on Linux
}

int fail(const std::string& what, const flashattn::Status& status) {
  std::fprintf(stderr, "flashattn-bench: %s: %s (%s)\n", what.c_str(), status.message().c_str(),
               flashattn::to_string(status.code()));
  return 1;
}

void print_line(const Options& o, Backend backend, DType dtype, const Result& r) {
  std::printf("flashattn-bench: %s on %s (%s), %s %s, b=%d h=%d/%d sq=%d sk=%d d=%d%s",
              flashattn::to_string(backend), r.device.c_str(), r.implementation.c_str(),
              flashattn::to_string(dtype), o.direction == Direction::kForward ? "fwd" : "bwd",
              o.batch, o.heads, o.heads_k, o.seqlen_q, o.seqlen_k, o.hdim, o.causal ? " causal" : "");
  if (o.window_left >= 0 || o.window_right >= 0) std::printf(" window=(%d,%d)", o.window_left, o.window_right);
  if (o.softcap > 0) std::printf(" softcap=%g", o.softcap);
  if (o.dropout_p > 0) std::printf(" dropout=%g", o.dropout_p);
  std::printf(": %.3f ms (median of %zu), %.2f TFLOP/s", r.median_ms, r.ms.size(), r.tflops);
  if (backend != Backend::kCuda) {
    std::printf(", %.1f GFLOP/s = %.0f%% of the fp32 FMA peak (%.1f GFLOP/s, %d threads, %s), "
                "peak RSS %.0f MiB",
                r.tflops * 1e3, 100.0 * r.tflops * 1e3 / r.cpu_peak_gflops, r.cpu_peak_gflops,
                r.cpu_threads, cpu_peak_isa(), r.peak_rss_mb);
    if (r.cpu_peak_bf16_gflops > 0) {
      std::printf(", %.0f%% of the bf16 peak (%.1f GFLOP/s, %s)",
                  100.0 * r.tflops * 1e3 / r.cpu_peak_bf16_gflops, r.cpu_peak_bf16_gflops,
                  cpu_peak_bf16_isa());
    }
  }
  if (r.host.ran) {
    std::printf(", host time per call %.2f us (validation and plan %.2f us; %d calls back to "
                "back)", r.host.call_us, r.host.plan_us, r.host.calls);
  }
  if (r.check.ran) {
    std::printf(", max_abs_err %.3g (max|ref| %.3g)", r.check.max_abs_err, r.check.max_ref);
  }
  std::printf("\n");
}

void print_json(const Options& o, Backend backend, DType dtype, const Result& r) {
  std::printf("{\"backend\": \"%s\", \"implementation\": \"%s\", \"device\": \"%s\", "
              "\"dtype\": \"%s\", \"direction\": \"%s\", \"batch\": %d, \"heads\": %d, "
              "\"heads_k\": %d, \"seqlen_q\": %d, \"seqlen_k\": %d, \"hdim\": %d, "
              "\"causal\": %s, \"window\": [%d, %d], \"softcap\": %g, \"dropout\": %g, \"ms\": %.6f, "
              "\"ms_min\": %.6f, \"iters\": %zu, \"buffer_sets\": %d, \"tflops\": %.4f, "
              "\"peak_rss_mb\": %.1f",
              flashattn::to_string(backend), r.implementation.c_str(), r.device.c_str(),
              flashattn::to_string(dtype), o.direction == Direction::kForward ? "fwd" : "bwd",
              o.batch, o.heads, o.heads_k, o.seqlen_q, o.seqlen_k, o.hdim,
              o.causal ? "true" : "false", o.window_left, o.window_right, o.softcap, o.dropout_p, r.median_ms,
              *std::min_element(r.ms.begin(), r.ms.end()), r.ms.size(), r.buffer_sets, r.tflops,
              r.peak_rss_mb);
  if (backend != Backend::kCuda) {
    std::printf(", \"cpu_threads\": %d, \"cpu_isa\": \"%s\", \"cpu_peak_gflops\": %.2f, "
                "\"fraction_of_peak\": %.4f",
                r.cpu_threads, cpu_peak_isa(), r.cpu_peak_gflops, r.tflops * 1e3 / r.cpu_peak_gflops);
    if (r.cpu_peak_bf16_gflops > 0) {
      std::printf(", \"cpu_peak_bf16_isa\": \"%s\", \"cpu_peak_bf16_gflops\": %.2f, "
                  "\"fraction_of_bf16_peak\": %.4f",
                  cpu_peak_bf16_isa(), r.cpu_peak_bf16_gflops,
                  r.tflops * 1e3 / r.cpu_peak_bf16_gflops);
    }
  }
  if (backend == Backend::kCuda) {
    std::printf(", \"workspace_bytes\": %zu, \"device_used_mb_before\": %.1f, "
                "\"device_used_mb_after\": %.1f",
                r.workspace_bytes, r.device_used_before / 1048576.0,
                r.device_used_after / 1048576.0);
  }
  print_host_time_json(r.host);
  if (r.check.ran) {
    std::printf(", \"max_abs_err\": %.6g, \"max_abs_ref\": %.6g", r.check.max_abs_err, r.check.max_ref);
  }
  std::printf("}\n");
}

int run(const Options& o) {
  Backend backend = o.backend;
  if (backend == Backend::kAuto) backend = flashattn::cuda_available() ? Backend::kCuda : Backend::kCpu;
  const DType dtype = resolve_dtype(o.dtype, backend);

  std::unique_ptr<Memory> memory = backend == Backend::kCuda ? make_cuda_memory() : make_host_memory();
  if (!memory) {
    std::fprintf(stderr, "flashattn-bench: --backend cuda needs a CUDA build and a visible GPU\n");
    return 1;
  }

  Result r;
  r.implementation = implementation_of(backend);
  r.device = memory->device_name();
  const HostInputs inputs = make_inputs(o, dtype, /*seed=*/20261130);
  r.buffer_sets = buffer_sets_needed(*memory, o, dtype);
  std::vector<BufferSet> sets(static_cast<size_t>(r.buffer_sets));
  for (BufferSet& set : sets) {
    if (!make_buffer_set(*memory, o, inputs, &set)) {
      std::fprintf(stderr, "flashattn-bench: out of memory for the problem's buffers\n");
      return 1;
    }
  }

  flashattn::Launch launch{backend, memory->stream(), nullptr, 0};
  const bool backward = o.direction == Direction::kBackward;
  size_t workspace = 0;
  flashattn::Status status =
      backward ? flashattn::workspace_size(backward_args(sets[0], o), backend, &workspace)
               : flashattn::workspace_size(forward_args(sets[0], o), backend, &workspace);
  if (!status.ok()) return fail("workspace size", status);
  r.workspace_bytes = workspace;  // this direction's own, before sharing it with the forward
  flashattn::Launch forward_launch = launch;
  if (backward) {
    size_t forward_workspace = 0;
    status = flashattn::workspace_size(forward_args(sets[0], o), backend, &forward_workspace);
    if (!status.ok()) return fail("forward workspace size", status);
    workspace = std::max(workspace, forward_workspace);
  }
  if (workspace > 0) {
    launch.workspace = forward_launch.workspace = memory->allocate(workspace);
    launch.workspace_bytes = forward_launch.workspace_bytes = workspace;
    if (launch.workspace == nullptr) {
      std::fprintf(stderr, "flashattn-bench: out of memory for %zu bytes of workspace\n", workspace);
      return 1;
    }
  }
  if (backward) {  // the backward consumes the forward's out and lse
    for (const BufferSet& set : sets) {
      status = flashattn::forward(forward_args(set, o), forward_launch);
      if (!status.ok()) return fail("forward (before the backward)", status);
    }
  }

  const bool slow = backend != Backend::kCuda;
  const int warmup = o.warmup >= 0 ? o.warmup : (slow ? 1 : 10);
  const int iters = o.iters > 0 ? o.iters : (slow ? 3 : 30);
  auto call = [&](int i) {
    const BufferSet& set = sets[static_cast<size_t>(i) % sets.size()];
    return backward ? flashattn::backward(backward_args(set, o), launch)
                    : flashattn::forward(forward_args(set, o), launch);
  };
  r.device_used_before = memory->device_used_bytes();
  r.ms = memory->time(call, warmup, iters, &status);
  r.device_used_after = memory->device_used_bytes();
  if (!status.ok()) return fail(backward ? "backward" : "forward", status);
  std::vector<double> sorted = r.ms;
  std::sort(sorted.begin(), sorted.end());
  r.median_ms = sorted[sorted.size() / 2];
  const double flops = forward_flops(o) * (backward ? 2.5 : 1.0);
  r.tflops = flops / (r.median_ms * 1e-3) / 1e12;
  if (o.host_time_calls > 0) {
    auto supported = [&] {
      return backward ? flashattn::supported(backward_args(sets[0], o), backend)
                      : flashattn::supported(forward_args(sets[0], o), backend);
    };
    r.host = measure_host_time(*memory, o.host_time_calls, supported, call, &status);
    if (!status.ok()) return fail("host time", status);
  }
  r.peak_rss_mb = peak_rss_mb();
  if (backend != Backend::kCuda) {
    r.cpu_threads = omp_get_max_threads();
    r.cpu_peak_gflops = measure_cpu_peak_fp32_gflops(r.cpu_threads);
    if (dtype == DType::kBF16) r.cpu_peak_bf16_gflops = measure_cpu_peak_bf16_gflops(r.cpu_threads);
  }

  if (o.check) {
    r.check = check_against_reference(*memory, o, inputs, sets[0]);
    if (!r.check.ran) {
      std::fprintf(stderr, "flashattn-bench: --check failed to run: %s\n", r.check.error.c_str());
      return 1;
    }
  }
  if (o.json) {
    print_json(o, backend, dtype, r);
  } else {
    print_line(o, backend, dtype, r);
  }
  return 0;
}

}  // namespace
}  // namespace fa_bench

int main(int argc, char** argv) {
  fa_bench::Options options;
  std::string message;
  if (!fa_bench::parse_options(argc, argv, &options, &message)) {
    const bool help = message == fa_bench::usage();
    std::fputs(message.c_str(), help ? stdout : stderr);
    return help ? 0 : 2;
  }
  if (options.mode == fa_bench::Mode::kDecode) return fa_bench::run_decode(options);
  return fa_bench::run(options);
}
