// The entry points as a whole: supported() agrees with what runs, workspace queries, and
// a rejected call leaves every output byte as it was.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_api_cases.hpp"

namespace api_test {
namespace {

using flashattn::Backend;
using flashattn::Launch;
using flashattn::Status;
using flashattn::StatusCode;
using flashattn::Tensor;

const Backend kAllBackends[] = {Backend::kAuto, Backend::kReference, Backend::kCpu, Backend::kCuda};

// A named change to a valid call.
template <class Args>
struct Mutation {
  std::string name;
  std::function<void(Args&)> apply;
};

std::vector<Mutation<flashattn::ForwardArgs>> forward_mutations() {
  return {
      {"valid", [](flashattn::ForwardArgs&) {}},
      {"no lse", [](flashattn::ForwardArgs& a) { a.lse = Tensor{}; }},
      {"causal", [](flashattn::ForwardArgs& a) { a.options.causal = true; }},
      {"k dtype", [](flashattn::ForwardArgs& a) { a.k.dtype = DType::kBF16; }},
      {"null out", [](flashattn::ForwardArgs& a) { a.out.data = nullptr; }},
      {"lse shape", [](flashattn::ForwardArgs& a) { a.lse.shape[2] = 4; }},
      {"dropout 1", [](flashattn::ForwardArgs& a) { a.options.dropout_p = 1.f; }},
      {"window conflict",
       [](flashattn::ForwardArgs& a) {
         a.options.causal = true;
         a.options.window_right = 2;
       }},
      {"fp16 on the host",
       [](flashattn::ForwardArgs& a) {
         for (Tensor* t : {&a.q, &a.k, &a.v, &a.out}) t->dtype = DType::kF16;
       }},
  };
}

TEST(ApiDispatch, SupportedAgreesWithForward) {
  for (const auto& mutation : forward_mutations()) {
    for (Backend backend : kAllBackends) {
      ForwardCase f;
      mutation.apply(f.args);
      const Status supported = flashattn::supported(f.args, backend);
      const Status ran = flashattn::forward(f.args, Launch{backend});
      const std::string where = mutation.name + " on " + flashattn::to_string(backend);
      if (supported.ok()) {
        EXPECT_TRUE(ran.ok()) << where << ": supported, then forward said " << ran.message();
      } else {
        EXPECT_EQ(ran.code(), supported.code()) << where;
        EXPECT_EQ(ran.message(), supported.message()) << where;
      }
    }
  }
}

TEST(ApiDispatch, SupportedAgreesWithBackwardAndKVCache) {
  for (Backend backend : kAllBackends) {
    BackwardCase b;
    const Status b_supported = flashattn::supported(b.args, backend);
    const Status b_ran = flashattn::backward(b.args, Launch{backend});
    EXPECT_EQ(b_ran.ok(), b_supported.ok()) << to_string(backend) << ": " << b_ran.message();
    if (!b_supported.ok()) EXPECT_EQ(b_ran.message(), b_supported.message());

    KVCacheCase c;
    const Status c_supported = flashattn::supported(c.args, backend);
    const Status c_ran = flashattn::forward_kvcache(c.args, Launch{backend});
    EXPECT_EQ(c_ran.ok(), c_supported.ok()) << to_string(backend) << ": " << c_ran.message();
    if (!c_supported.ok()) EXPECT_EQ(c_ran.message(), c_supported.message());
  }
}

TEST(ApiDispatch, UnknownBackend) {
  ForwardCase f;
  EXPECT_TRUE(Rejected(flashattn::supported(f.args, static_cast<Backend>(7)),
                       StatusCode::kInvalidArgument, "launch.backend"));
}

TEST(ApiDispatch, HostBackendsNeedNoWorkspace) {
  ForwardCase f;
  BackwardCase b;
  KVCacheCase c;
  for (Backend backend : {Backend::kAuto, Backend::kReference, Backend::kCpu}) {
    size_t bytes = 123;
    ASSERT_TRUE(flashattn::workspace_size(f.args, backend, &bytes).ok());
    EXPECT_EQ(bytes, 0u);
    bytes = 123;
    ASSERT_TRUE(flashattn::workspace_size(b.args, backend, &bytes).ok());
    EXPECT_EQ(bytes, 0u);
    bytes = 123;
    ASSERT_TRUE(flashattn::workspace_size(c.args, backend, &bytes).ok());
    EXPECT_EQ(bytes, 0u);
  }
}

TEST(ApiDispatch, WorkspaceSizeOfARejectedCall) {
  ForwardCase f;
  f.args.v.shape[0] = 9;
  size_t bytes = 123;
  const Status status = flashattn::workspace_size(f.args, Backend::kCpu, &bytes);
  EXPECT_TRUE(Rejected(status, StatusCode::kInvalidArgument, "v"));
  EXPECT_EQ(status.message(), flashattn::supported(f.args, Backend::kCpu).message());
  EXPECT_EQ(bytes, 123u) << "a rejected query writes nothing";
  ForwardCase g;
  EXPECT_TRUE(Rejected(flashattn::workspace_size(g.args, Backend::kCpu, nullptr),
                       StatusCode::kInvalidArgument, "bytes"));
}

// Launch::allocate_workspace is asked only for a workspace a valid call needs: never by
// the host backends (they need none), never for a rejected call.
TEST(ApiDispatch, WorkspaceAllocatorAskedOnlyForNeededBytes) {
  int asked = 0;
  Launch launch{Backend::kCpu};
  launch.allocate_workspace = [](size_t, void* context) -> void* {
    ++*static_cast<int*>(context);
    return nullptr;
  };
  launch.allocator_context = &asked;
  ForwardCase f;
  EXPECT_TRUE(flashattn::forward(f.args, launch).ok());
  BackwardCase b;
  EXPECT_TRUE(flashattn::backward(b.args, launch).ok());
  KVCacheCase c;
  EXPECT_TRUE(flashattn::forward_kvcache(c.args, launch).ok());
  ForwardCase rejected;
  rejected.args.v.shape[0] = 9;
  for (Backend backend : kAllBackends) {
    launch.backend = backend;
    EXPECT_FALSE(flashattn::forward(rejected.args, launch).ok());
  }
  EXPECT_EQ(asked, 0);
}

// Poisons the outputs, runs `call` (which must be rejected) and compares every byte.
template <class Case, class Call>
void expect_untouched(Case& c, Call call, const std::string& what) {
  c.poison_outputs();
  const Snapshot before = c.outputs();
  const Status status = call(c.args);
  EXPECT_FALSE(status.ok()) << what;
  EXPECT_TRUE(c.outputs() == before) << what << " wrote to an output: " << status.message();
}

TEST(ApiDispatch, RejectedForwardWritesNothing) {
  for (const auto& mutation : forward_mutations()) {
    if (mutation.name == "valid" || mutation.name == "no lse" || mutation.name == "causal" ||
        mutation.name == "fp16 on the host") {
      continue;
    }
    ForwardCase f;
    mutation.apply(f.args);
    expect_untouched(
        f, [](const flashattn::ForwardArgs& a) { return flashattn::forward(a); }, mutation.name);
  }
}

TEST(ApiDispatch, RejectedBackwardWritesNothing) {
  BackwardCase b;
  b.args.dv.shape[3] = 3;
  expect_untouched(
      b, [](const flashattn::BackwardArgs& a) { return flashattn::backward(a); }, "dv shape");
  BackwardCase c;
  c.args.options.softcap = -1.f;
  expect_untouched(
      c, [](const flashattn::BackwardArgs& a) { return flashattn::backward(a); }, "softcap");
}

TEST(ApiDispatch, RejectedAppendWritesNothingToTheCache) {
  auto run = [](const flashattn::KVCacheArgs& a) { return flashattn::forward_kvcache(a); };
  KVCacheCase c;
  c.cache_seqlens.set(1, 31);  // the append would overflow the cache
  expect_untouched(c, run, "append beyond capacity");
  KVCacheCase d(KVCacheShape{true, 16, 32, 2});
  d.block_table.set(0, 1000);
  expect_untouched(d, run, "page index out of range");
  KVCacheCase e;
  e.args.lse.shape[1] = 5;
  expect_untouched(e, run, "lse shape");
}

TEST(ApiDispatch, VersionAndNames) {
  EXPECT_STRNE(flashattn::version(), "");
  EXPECT_STREQ(flashattn::to_string(Backend::kReference), "reference");
  EXPECT_STREQ(flashattn::to_string(StatusCode::kUnsupported), "unsupported");
}

}  // namespace
}  // namespace api_test
