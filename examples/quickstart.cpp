// Causal attention over host tensors with flashattn's C++ API.
#include <flashattn/flashattn.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const int batch = 2, seqlen = 128, heads = 4, head_dim = 64;
  const size_t count = size_t(batch) * seqlen * heads * head_dim;
  std::vector<float> q(count), k(count), v(count), out(count);
  for (size_t i = 0; i < count; ++i) {
    q[i] = std::sin(0.1f * i);
    k[i] = std::cos(0.3f * i);
    v[i] = std::sin(0.7f * i + 1.f);
  }

  using flashattn::DType;
  flashattn::ForwardArgs args;
  args.q = flashattn::make_tensor(q.data(), DType::kF32, {batch, seqlen, heads, head_dim});
  args.k = flashattn::make_tensor(k.data(), DType::kF32, {batch, seqlen, heads, head_dim});
  args.v = flashattn::make_tensor(v.data(), DType::kF32, {batch, seqlen, heads, head_dim});
  args.out = flashattn::make_tensor(out.data(), DType::kF32, {batch, seqlen, heads, head_dim});
  args.options.causal = true;

  // Host tensors run on the CPU backend; device tensors (Device{DeviceType::kCUDA, 0})
  // run the CUDA kernels on Launch::stream.
  const flashattn::Status status = flashattn::forward(args);
  if (!status.ok()) {
    std::fprintf(stderr, "flashattn: %s\n", status.message().c_str());
    return 1;
  }

  // With a causal mask the first query sees only the first key, so its output is v[0].
  double worst = 0;
  for (int i = 0; i < heads * head_dim; ++i) worst = std::fmax(worst, std::fabs(out[i] - v[i]));
  std::printf("flashattn %s: out[0][0][0][:4] = %.4f %.4f %.4f %.4f, |out[0] - v[0]| = %.2g\n",
              flashattn::version(), out[0], out[1], out[2], out[3], worst);
  return worst < 1e-5 ? 0 : 1;
}
