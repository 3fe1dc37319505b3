#include "support/nonfinite_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace fa_test {
namespace {

// How an output's logical elements map to (batch, head): [batch, rows, heads, dim], or the
// lse layout [batch, heads, rows].
struct OutputLayout {
  const char* name;
  int64_t rows = 0;
  int heads = 0;
  int dim = 0;
  bool lse = false;
  bool key_side = false;  // heads are KV heads (dk, dv)

  void locate(int64_t n, int* batch, int* head) const {
    const int64_t per_batch = rows * heads * (lse ? 1 : dim);
    *batch = static_cast<int>(n / per_batch);
    *head = static_cast<int>(lse ? n % per_batch / rows : n / dim % heads);
  }
};

// The (batch, KV head) the poisoned element belongs to.
struct Group {
  int batch;
  int kv_head;
  int group_size;  // query heads per KV head

  bool holds(const OutputLayout& layout, int64_t n) const {
    int b = 0, h = 0;
    layout.locate(n, &b, &h);
    return b == batch && (layout.key_side ? h : h / group_size) == kv_head;
  }
};

Group group_of(const Poison& poison, int nheads, int nheads_k) {
  const int size = nheads / nheads_k;
  const bool query_side = poison.tensor == Poisoned::kQ || poison.tensor == Poisoned::kDout;
  return {poison.batch, query_side ? poison.head / size : poison.head, size};
}

void expect_element_contained(const OutputLayout& layout, const HostTensor& clean,
                              const HostTensor& dirty, const HostTensor& reference,
                              const Group& group, Containment containment) {
  int wrong = 0;
  for (int64_t n = 0; n < dirty.numel() && wrong < 5; ++n) {
    const float got = dirty.get(n);
    const bool leaked_to_reference = !std::isfinite(reference.get(n));
    std::string failure;
    if (leaked_to_reference) {
      if (std::isfinite(got)) failure = "finite where the reference is not";
    } else if (containment == Containment::kFinite) {
      if (!group.holds(layout, n) && !std::isfinite(got)) {
        failure = "not finite outside the poisoned group: " + std::to_string(got);
      }
    } else if (containment == Containment::kRows || !group.holds(layout, n)) {
      // Values compare with ==, so a zero may change its sign.
      if (!(got == clean.get(n))) {
        failure = "changed by a value it does not see: " + std::to_string(got) + " (clean run " +
                  std::to_string(clean.get(n)) + ")";
      }
    }
    if (!failure.empty()) {
      ++wrong;
      int b = 0, h = 0;
      layout.locate(n, &b, &h);
      ADD_FAILURE() << layout.name << " element " << n << " (batch " << b << ", head " << h
                    << "): " << failure;
    }
  }
}

HostTensor* poisoned_tensor(Inputs* in, Poisoned which) {
  switch (which) {
    case Poisoned::kQ: return &in->q;
    case Poisoned::kK: return &in->k;
    case Poisoned::kV: return &in->v;
    case Poisoned::kDout: return &in->dout;
  }
  return nullptr;
}

// Dense: [batch, rows, heads, dim]. Varlen: [rows, heads, dim], the sequences packed, so
// (batch, row) is row row0(batch) + row.
void poison_element(const Problem& p, const Poison& poison, Inputs* in) {
  HostTensor* t = poisoned_tensor(in, poison.tensor);
  if (p.varlen()) {
    const bool query_side = poison.tensor == Poisoned::kQ || poison.tensor == Poisoned::kDout;
    const int64_t row =
        (query_side ? p.q_row0(poison.batch) : p.k_row0(poison.batch)) + poison.row;
    t->set((row * t->size(1) + poison.head) * t->size(2) + poison.element, poison.value);
    return;
  }
  const int64_t rows = t->size(1), heads = t->size(2), dim = t->size(3);
  t->set(((poison.batch * rows + poison.row) * heads + poison.head) * dim + poison.element,
         poison.value);
}

struct Layouts {
  OutputLayout out, lse, dq, dk, dv;
};

// Varlen outputs are one "batch entry" of all the packed rows (kRows containment only: it
// compares every element with the clean run, whatever its sequence).
Layouts layouts_of(const Problem& p) {
  const int64_t rows_q = p.varlen() ? p.total_q() : p.seqlen_q;
  const int64_t rows_k = p.varlen() ? p.total_k() : p.seqlen_k;
  return {{"out", rows_q, p.nheads, p.dim_v()},
          {"lse", rows_q, p.nheads, 1, true},
          {"dq", rows_q, p.nheads, p.head_dim},
          {"dk", rows_k, p.nheads_k, p.head_dim, false, true},
          {"dv", rows_k, p.nheads_k, p.dim_v(), false, true}};
}

// Runs the forward (and the backward) of `runner` on `in`.
Outputs run(const Problem& p, const Inputs& in, const Runner& runner, bool backward) {
  Outputs out = make_outputs(p);
  const flashattn::Status forward = runner.forward(forward_args(p, in, &out));
  EXPECT_TRUE(forward.ok()) << runner.name << ": " << forward.message();
  if (backward && forward.ok()) {
    const flashattn::Status status = runner.backward(backward_args(p, in, &out));
    EXPECT_TRUE(status.ok()) << runner.name << ": " << status.message();
  }
  return out;
}

void expect_attention_contained(const Problem& p, const Poison& poison, const Runner& runner,
                                Containment containment, bool backward) {
  ASSERT_TRUE(!p.varlen() || containment == Containment::kRows)
      << "varlen problems: the rows containment only";
  const Inputs clean_in = make_inputs(p);
  Inputs dirty_in = clean_in;
  poison_element(p, poison, &dirty_in);
  const Outputs clean = run(p, clean_in, runner, backward);
  const Outputs dirty = run(p, dirty_in, runner, backward);
  const Outputs reference = run(p, dirty_in, host_runner(flashattn::Backend::kReference), backward);
  const Group group = group_of(poison, p.nheads, p.nheads_k);
  const Layouts layouts = layouts_of(p);
  expect_element_contained(layouts.out, clean.out, dirty.out, reference.out, group, containment);
  expect_element_contained(layouts.lse, clean.lse, dirty.lse, reference.lse, group, containment);
  if (!backward) return;
  expect_element_contained(layouts.dq, clean.dq, dirty.dq, reference.dq, group, containment);
  expect_element_contained(layouts.dk, clean.dk, dirty.dk, reference.dk, group, containment);
  expect_element_contained(layouts.dv, clean.dv, dirty.dv, reference.dv, group, containment);
}

}  // namespace

void expect_forward_contained(const Problem& problem, const Poison& poison, const Runner& runner,
                              Containment containment) {
  expect_attention_contained(problem, poison, runner, containment, false);
}

void expect_backward_contained(const Problem& problem, const Poison& poison,
                               const Runner& runner, Containment containment) {
  expect_attention_contained(problem, poison, runner, containment, true);
}

void expect_kvcache_contained(const KVCacheProblem& p, const Poison& poison,
                              const Runner& runner, Containment containment) {
  ASSERT_NE(poison.tensor, Poisoned::kDout) << "a KV-cache call has no dout";
  const KVCacheInputs clean_in = make_kvcache_inputs(p);
  KVCacheInputs dirty_in = clean_in;
  if (poison.tensor == Poisoned::kQ) {
    dirty_in.q.set(((int64_t(poison.batch) * p.seqlen_q + poison.row) * p.nheads + poison.head) *
                           p.head_dim +
                       poison.element,
                   poison.value);
  } else {
    HostTensor& cache = poison.tensor == Poisoned::kK ? dirty_in.k_cache : dirty_in.v_cache;
    cache.set(cache_index(p, dirty_in, poison.batch, poison.row, poison.head, poison.element),
              poison.value);
  }
  const auto run_kvcache = [&](const KVCacheInputs& in, const Runner& r) {
    KVCacheOutputs out = make_kvcache_outputs(p, in);
    const flashattn::Status status = r.forward_kvcache(kvcache_args(p, in, &out));
    EXPECT_TRUE(status.ok()) << r.name << ": " << status.message();
    return out;
  };
  const KVCacheOutputs clean = run_kvcache(clean_in, runner);
  const KVCacheOutputs dirty = run_kvcache(dirty_in, runner);
  const KVCacheOutputs reference =
      run_kvcache(dirty_in, host_runner(flashattn::Backend::kReference));
  const Group group = group_of(poison, p.nheads, p.nheads_k);
  expect_element_contained({"out", p.seqlen_q, p.nheads, p.head_dim}, clean.out, dirty.out,
                           reference.out, group, containment);
  expect_element_contained({"lse", p.seqlen_q, p.nheads, 1, true}, clean.lse, dirty.lse,
                           reference.lse, group, containment);
}

}  // namespace fa_test
