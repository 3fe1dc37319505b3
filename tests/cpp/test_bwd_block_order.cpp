// The backward kernels' block order (src/cuda/common/bwd_block_order.cuh), checked on the CPU: every
// grid index owns a distinct (key block, head, batch entry); in the deterministic mode a block
// only waits on blocks that start before it (the higher key blocks of its pair have smaller
// linear indices), which is what keeps the turn-taking free of deadlock; and the orders are
// the ones the comments promise. The rotated order: its tickets and, at each query block,
// turns in the order in which the key blocks reach it. Turn groups: the same guarantees, and
// turns that follow the group order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/common/bwd_block_order.cuh"

namespace {

using flashattn::cuda::bwd_block_at;
using flashattn::cuda::bwd_grouped_turn;
using flashattn::cuda::bwd_rotated_start;
using flashattn::cuda::bwd_rotated_turn;
using flashattn::cuda::bwd_ticket_block;
using flashattn::cuda::BwdBlock;
using flashattn::cuda::kBwdInterleave;

struct Grid {
  int key_blocks, heads, batch;
};

// Linear index (x fastest) of every block, keyed by what it owns.
std::map<std::tuple<int, int, int>, int64_t> owners(const Grid& g, bool deterministic,
                                                    bool masked, int group_blocks = 0) {
  std::map<std::tuple<int, int, int>, int64_t> owned;
  for (int z = 0; z < g.batch; ++z) {
    for (int y = 0; y < g.heads; ++y) {
      for (int x = 0; x < g.key_blocks; ++x) {
        const BwdBlock b = bwd_block_at(x, y, z, g.key_blocks, g.heads, g.batch, deterministic,
                                        masked, group_blocks);
        EXPECT_TRUE(b.n >= 0 && b.n < g.key_blocks && b.hk >= 0 && b.hk < g.heads && b.b >= 0 &&
                    b.b < g.batch);
        const int64_t linear = x + static_cast<int64_t>(g.key_blocks) * (y + g.heads * z);
        EXPECT_TRUE(owned.emplace(std::make_tuple(b.n, b.hk, b.b), linear).second)
            << "two blocks own key block " << b.n << " of head " << b.hk << ", batch " << b.b;
      }
    }
  }
  EXPECT_EQ(owned.size(), static_cast<size_t>(g.key_blocks) * g.heads * g.batch);
  return owned;
}

const Grid kGrids[] = {{1, 1, 1}, {8, 16, 16}, {8, 3, 2}, {5, 7, 1}, {128, 1, 1}, {3, 1, 9}};

TEST(BwdBlockOrder, EveryBlockOwnsADistinctTile) {
  for (const Grid& g : kGrids) {
    for (const bool deterministic : {false, true}) {
      for (const bool masked : {false, true}) owners(g, deterministic, masked);
    }
  }
}

TEST(BwdBlockOrder, DeterministicWaitsOnlyOnEarlierBlocks) {
  for (const Grid& g : kGrids) {
    for (const bool masked : {false, true}) {
      const auto owned = owners(g, true, masked);
      for (const auto& [tile, linear] : owned) {
        const auto [n, hk, b] = tile;
        for (int higher = n + 1; higher < g.key_blocks; ++higher) {
          EXPECT_LT(owned.at(std::make_tuple(higher, hk, b)), linear)
              << "key block " << n << " would wait on key block " << higher
              << " that starts after it";
        }
      }
    }
  }
}

TEST(BwdBlockOrder, DefaultStartsWithTheLowestKeyBlockOfEachPair) {
  const Grid g{8, 3, 2};
  const auto owned = owners(g, false, false);
  for (const auto& [tile, linear] : owned) {
    const auto [n, hk, b] = tile;
    EXPECT_EQ(linear, n + g.key_blocks * (hk + g.heads * b));
  }
  EXPECT_EQ(owners(g, false, true), owned);
}

TEST(BwdBlockOrder, DeterministicInterleavesPairsOnlyWithoutAMask) {
  const Grid g{8, 16, 16};
  const auto masked = owners(g, true, true);
  for (const auto& [tile, linear] : masked) {
    const auto [n, hk, b] = tile;
    EXPECT_EQ(linear, (g.key_blocks - 1 - n) + g.key_blocks * (hk + g.heads * b));
  }
  // Without a mask consecutive key blocks of a pair start kBwdInterleave blocks apart.
  const auto unmasked = owners(g, true, false);
  for (const auto& [tile, linear] : unmasked) {
    const auto [n, hk, b] = tile;
    if (n + 1 < g.key_blocks) {
      EXPECT_EQ(linear - unmasked.at(std::make_tuple(n + 1, hk, b)), kBwdInterleave);
    }
  }
}

// In turn groups a key block waits on the lower groups of its pair and on the higher key blocks
// of its own group; all of them start before it. Groups as large as the pair are the fixed
// order.
TEST(BwdBlockOrder, GroupedWaitsOnlyOnEarlierBlocks) {
  const Grid grids[] = {{1, 1, 1}, {32, 8, 1}, {33, 3, 2}, {256, 2, 1}, {5, 7, 1}};
  for (const Grid& g : grids) {
    for (const int group_blocks : {1, 3, 16, 17, 32, 64}) {
      const auto owned = owners(g, true, true, group_blocks);
      for (const auto& [tile, linear] : owned) {
        const auto [n, hk, b] = tile;
        const int first = n / group_blocks * group_blocks;
        const int last = std::min(first + group_blocks, g.key_blocks);
        for (int other = 0; other < last; ++other) {
          if (other >= first && other <= n) continue;
          EXPECT_LT(owned.at(std::make_tuple(other, hk, b)), linear)
              << "key block " << n << " (groups of " << group_blocks << ") would wait on key block "
              << other << " that starts after it";
        }
      }
      if (group_blocks >= g.key_blocks) EXPECT_EQ(owned, owners(g, true, true));
    }
  }
}

// At a query block that key blocks [begin, end) visit, the grouped turns are 0, 1, ... in the
// order lower group first, within a group the higher key block first; without groups, the
// higher key block first.
TEST(BwdBlockOrder, GroupedTurnsFollowTheGroupOrder) {
  for (const int group_blocks : {0, 1, 2, 5, 16}) {
    for (int begin = 0; begin < 12; ++begin) {
      for (int end = begin + 1; end <= 40; ++end) {
        std::vector<int> order(end - begin);
        std::iota(order.begin(), order.end(), begin);
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          const int ga = group_blocks > 0 ? a / group_blocks : 0;
          const int gb = group_blocks > 0 ? b / group_blocks : 0;
          return ga != gb ? ga < gb : a > b;
        });
        for (int rank = 0; rank < static_cast<int>(order.size()); ++rank) {
          EXPECT_EQ(bwd_grouped_turn(order[rank], begin, end, group_blocks), rank)
              << "key block " << order[rank] << " of [" << begin << ", " << end << "), groups of "
              << group_blocks;
        }
      }
    }
  }
}

// The rotated order's tickets: every ticket owns a distinct tile, a pair's tickets are
// consecutive (only the pair of the latest tickets can be missing blocks) and go highest key
// block first (a key block of the fixed order would wait only on earlier tickets).
TEST(BwdBlockOrder, TicketsGiveEachPairConsecutiveTicketsHighestFirst) {
  for (const Grid& g : kGrids) {
    const int64_t blocks = static_cast<int64_t>(g.key_blocks) * g.heads * g.batch;
    std::set<std::tuple<int, int, int>> owned;
    for (int64_t t = 0; t < blocks; ++t) {
      const BwdBlock b = bwd_ticket_block(t, g.key_blocks, g.heads);
      ASSERT_TRUE(b.hk >= 0 && b.hk < g.heads && b.b >= 0 && b.b < g.batch);
      EXPECT_EQ(b.n, g.key_blocks - 1 - static_cast<int>(t % g.key_blocks)) << "ticket " << t;
      EXPECT_EQ(static_cast<int64_t>(b.b) * g.heads + b.hk, t / g.key_blocks) << "ticket " << t;
      EXPECT_TRUE(owned.emplace(b.n, b.hk, b.b).second) << "ticket " << t;
    }
    EXPECT_EQ(owned.size(), static_cast<size_t>(blocks));
  }
}

// E key blocks, M >= E query blocks: at every query block the turns are 0..E-1, given in the
// order of the step at which each key block reaches it, (m - start) mod M. Then, with the
// blocks in step, a block's predecessors at a query block were there at earlier steps.
TEST(BwdBlockOrder, RotatedTurnsFollowTheArrivalOrder) {
  for (int keys = 1; keys <= 20; ++keys) {
    for (int queries = keys; queries <= 40; ++queries) {
      std::set<int> starts;
      for (int n = 0; n < keys; ++n) starts.insert(bwd_rotated_start(n, keys, queries));
      EXPECT_EQ(starts.size(), static_cast<size_t>(keys)) << keys << " x " << queries;
      for (int m = 0; m < queries; ++m) {
        std::vector<int> by_arrival(keys);
        std::iota(by_arrival.begin(), by_arrival.end(), 0);
        auto step_at_m = [&](int n) {
          return (m - bwd_rotated_start(n, keys, queries) + queries) % queries;
        };
        std::sort(by_arrival.begin(), by_arrival.end(),
                  [&](int a, int b) { return step_at_m(a) < step_at_m(b); });
        for (int rank = 0; rank < keys; ++rank) {
          EXPECT_EQ(bwd_rotated_turn(by_arrival[rank], m, keys, queries), rank)
              << "key block " << by_arrival[rank] << " of " << keys << ", query block " << m
              << " of " << queries;
        }
      }
    }
  }
}

}  // namespace
