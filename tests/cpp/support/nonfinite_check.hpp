// Where a NaN or an infinity in one input element may go. SPEC: it propagates through the
// keys a row sees, and a key or value a row cannot see takes no part in that row. Each
// check runs a backend twice (clean inputs, then with one element poisoned) and the exact
// reference once on the poisoned inputs, then compares output element by element:
//   - where the reference is not finite, the backend is not finite either;
//   - where the reference is finite, the backend gives what its clean run gave (kRows),
//     or at least every (batch, head) the poisoned element does not belong to does (kHeads).
#pragma once

#include "support/backend_runner.hpp"
#include "support/kvcache_problem.hpp"
#include "support/reference_problem.hpp"

namespace fa_test {

enum class Poisoned { kQ, kK, kV, kDout };

// Element (batch, row, head, element) of q, k, v or dout ([batch, seqlen, heads, d]; varlen:
// row `row` of sequence `batch`); for a KV-cache problem, row is a cache position of batch
// entry `batch` (k and v are the caches).
struct Poison {
  Poisoned tensor = Poisoned::kV;
  int batch = 0;
  int row = 0;
  int head = 0;  // a query head for q and dout, a KV head for k and v
  int element = 0;
  float value = 0.f;
};

enum class Containment {
  kRows,   // the contract: rows that do not see the value are unchanged
  kHeads,  // weaker (documented for the CUDA kernels): other (batch, KV head) groups unchanged
  kFinite,  // for runs that do not repeat bit for bit: other groups stay finite
};

void expect_forward_contained(const Problem& problem, const Poison& poison, const Runner& runner,
                              Containment containment);
// The runner's forward then its backward (out, lse, dq, dk, dv compared). Varlen problems
// take Containment::kRows only.
void expect_backward_contained(const Problem& problem, const Poison& poison,
                               const Runner& runner, Containment containment);
// Poisoned q, k (cache) or v (cache); out and lse compared.
void expect_kvcache_contained(const KVCacheProblem& problem, const Poison& poison,
                              const Runner& runner, Containment containment);

}  // namespace fa_test
