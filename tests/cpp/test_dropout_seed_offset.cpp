// AttentionOptions::dropout_seed_offset: the Philox pair read from memory when the call runs
// gives exactly what the same values passed as dropout_seed / dropout_offset give, forward
// and backward, on the reference and the CPU backend; the values in memory win over the
// fields; a pointer without dropout is refused by name, writing nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "flashattn/flashattn.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {
namespace {

using flashattn::Backend;

Problem dropout_problem(DType dtype) {
  Problem p;
  p.dtype = dtype;
  p.batch = 2;
  p.nheads = 4;
  p.nheads_k = 2;
  p.seqlen_q = 37;
  p.seqlen_k = 53;
  p.head_dim = 32;
  p.causal = true;
  p.dropout_p = 0.3f;
  p.seed = 77;
  return p;
}

bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.raw_bytes() == b.raw_bytes();
}

// Forward then backward with the pair given as values (`from_memory` false) or read from
// `pair` (the fields then hold other values, which must be ignored).
Outputs run(const Problem& p, const Inputs& in, Backend backend, const uint64_t* pair,
            bool from_memory) {
  Outputs out = make_outputs(p);
  flashattn::ForwardArgs f = forward_args(p, in, &out);
  if (from_memory) {
    f.options.dropout_seed = pair[0] ^ 1;
    f.options.dropout_offset = pair[1] + 4;
    f.options.dropout_seed_offset = pair;
  } else {
    f.options.dropout_seed = pair[0];
    f.options.dropout_offset = pair[1];
  }
  EXPECT_TRUE(flashattn::forward(f, flashattn::Launch{backend}).ok());
  flashattn::BackwardArgs b = backward_args(p, in, &out);
  b.options = f.options;
  EXPECT_TRUE(flashattn::backward(b, flashattn::Launch{backend}).ok());
  return out;
}

TEST(DropoutSeedOffset, ReadFromMemoryEqualsTheValues) {
  const uint64_t pair[2] = {0x0123456789ABCDEFull, 0x100000007ull};
  for (Backend backend : {Backend::kReference, Backend::kCpu}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Problem p = dropout_problem(dtype);
      const Inputs in = make_inputs(p);
      const Outputs values = run(p, in, backend, pair, false);
      const Outputs memory = run(p, in, backend, pair, true);
      SCOPED_TRACE(std::string(flashattn::to_string(backend)) + " " + flashattn::to_string(dtype));
      EXPECT_TRUE(same_bytes(values.out, memory.out));
      EXPECT_TRUE(same_bytes(values.lse, memory.lse));
      EXPECT_TRUE(same_bytes(values.dq, memory.dq));
      EXPECT_TRUE(same_bytes(values.dk, memory.dk));
      EXPECT_TRUE(same_bytes(values.dv, memory.dv));
      // And the pair matters: the values the fields held give another mask.
      const uint64_t other[2] = {pair[0] ^ 1, pair[1] + 4};
      EXPECT_FALSE(same_bytes(values.out, run(p, in, backend, other, false).out));
    }
  }
}

TEST(DropoutSeedOffset, PointerWithoutDropoutIsRefused) {
  const uint64_t pair[2] = {1, 2};
  Problem p = dropout_problem(DType::kF32);
  p.dropout_p = 0.f;
  const Inputs in = make_inputs(p);
  Outputs out = make_outputs(p);
  const HostTensor poisoned = out.out;
  flashattn::ForwardArgs f = forward_args(p, in, &out);
  f.options.dropout_seed_offset = pair;
  const flashattn::Status s = flashattn::forward(f, flashattn::Launch{Backend::kCpu});
  EXPECT_EQ(s.code(), flashattn::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("options.dropout_seed_offset"), std::string::npos) << s.message();
  EXPECT_TRUE(same_bytes(out.out, poisoned)) << "nothing written on a refused call";
  flashattn::BackwardArgs b = backward_args(p, in, &out);
  b.options.dropout_seed_offset = pair;
  EXPECT_EQ(flashattn::backward(b, flashattn::Launch{Backend::kCpu}).code(),
            flashattn::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fa_test
