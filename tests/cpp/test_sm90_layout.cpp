// The host-side logic of the sm90 building blocks, checked on the CPU: the 128-byte-swizzle
// tile, the wgmma descriptors built for it (against an independent model of how the
// hardware turns a descriptor into addresses, from the PTX ISA's canonical layouts), and
// the register fragment maps. The GPU test (cuda/test_cuda_wgmma.cu) runs the instructions.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "cuda/sm90/swizzle128_tile.cuh"
#include "cuda/sm90/wgmma_descriptor.cuh"
#include "cuda/sm90/wgmma_fragments.cuh"

namespace {

using flashattn::cuda::sm90::AccumulatorFragment;
using flashattn::cuda::sm90::encode_descriptor;
using flashattn::cuda::sm90::fp8_key_at;
using flashattn::cuda::sm90::FragmentCoord;
using flashattn::cuda::sm90::Major;
using flashattn::cuda::sm90::RegisterAFragment;
using flashattn::cuda::sm90::RegisterAFragment8;
using flashattn::cuda::sm90::Swizzle128Tile;
using flashattn::cuda::sm90::WgmmaOperand;

// A nonzero shared address on a 1024-byte boundary, as a kernel's tile would have.
constexpr uint32_t kTileAddr = 5 * 1024;

// The shared address from which wgmma reads element `mn` (row of a K-major operand, column
// of an MN-major one) at k index `k` (< 16, or < 32 for 8-bit elements) of the step the
// descriptor describes. Read from the descriptor's bits as the PTX ISA defines them, then
// 128-byte-swizzled on the absolute address: 16-byte chunk bits 4-6 XOR line bits 7-9.
uint32_t wgmma_reads(uint64_t desc, Major major, int mn, int k, int elem_bytes = 2) {
  EXPECT_EQ(desc >> 62, 1u) << "swizzle mode must be 128B";
  EXPECT_EQ((desc >> 49) & 7u, 0u) << "base offset must be 0";
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t leading = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const uint32_t stride = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  uint32_t addr;
  if (major == Major::kK) {
    addr = start + (mn / 8) * stride + (mn % 8) * 128 + k * elem_bytes;
  } else {
    addr = start + (mn / 64) * leading + (k / 8) * stride + (k % 8) * 128 + (mn % 64) * 2;
  }
  return addr ^ (((addr >> 7) & 7u) << 4);
}

template <class Tile>
void expect_bijection() {
  std::set<uint32_t> seen;
  for (int r = 0; r < Tile::kRows; ++r) {
    for (int c = 0; c < Tile::kCols; ++c) {
      const uint32_t off = Tile::byte_offset(r, c);
      ASSERT_LT(off, static_cast<uint32_t>(Tile::kBytes));
      ASSERT_EQ(off % Tile::kElemBytes, 0u);
      ASSERT_TRUE(seen.insert(off).second) << "(" << r << ", " << c << ") overlaps";
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(Tile::kRows * Tile::kCols));
}

TEST(Sm90Layout, TileIsABijectionWithContiguousChunks) {
  expect_bijection<Swizzle128Tile<64, 64>>();
  expect_bijection<Swizzle128Tile<64, 128>>();
  expect_bijection<Swizzle128Tile<256, 128>>();
  expect_bijection<Swizzle128Tile<128, 256>>();
  expect_bijection<Swizzle128Tile<64, 128, 1>>();
  expect_bijection<Swizzle128Tile<192, 256, 1>>();
  using Tile = Swizzle128Tile<64, 128>;
  for (int r = 0; r < Tile::kRows; ++r) {
    for (int c = 0; c < Tile::kCols; c += 8) {
      for (int e = 1; e < 8; ++e) {
        ASSERT_EQ(Tile::byte_offset(r, c + e), Tile::byte_offset(r, c) + 2 * e);
      }
    }
  }
}

// Every element of every k-step of the operand, where the tile put it and where wgmma reads
// it through the descriptor (built per step and advanced from step 0) must agree.
template <class Tile, Major kMajor>
int count_misreads(uint32_t tile_addr, bool swap_strides = false) {
  using Operand = WgmmaOperand<Tile, kMajor>;
  const int mn_extent = kMajor == Major::kK ? Tile::kRows : Tile::kCols;
  int misreads = 0;
  for (int step = 0; step < Operand::kKSteps; ++step) {
    uint64_t desc = Operand::descriptor(tile_addr, step);
    EXPECT_EQ(desc, Operand::advance(Operand::descriptor(tile_addr), step));
    if (swap_strides) {
      desc = encode_descriptor(tile_addr + Operand::k_step_bytes(step), Operand::kStrideBytes,
                               Operand::kLeadingBytes);
    }
    for (int mn = 0; mn < mn_extent; ++mn) {
      for (int k = 0; k < Operand::kStepK; ++k) {
        const int kk = Operand::kStepK * step + k;
        const uint32_t stored = tile_addr + (kMajor == Major::kK ? Tile::byte_offset(mn, kk)
                                                                 : Tile::byte_offset(kk, mn));
        misreads += wgmma_reads(desc, kMajor, mn, k, Tile::kElemBytes) != stored;
      }
    }
  }
  return misreads;
}

TEST(Sm90Layout, DescriptorsReadWhatTheTileStores) {
  // A and K-major B (S = Q K^T): rows = M or N, cols = K.
  EXPECT_EQ((count_misreads<Swizzle128Tile<64, 64>, Major::kK>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<64, 128>, Major::kK>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<256, 128>, Major::kK>(kTileAddr)), 0);
  // MN-major B (O = P V): rows = K, cols = N.
  EXPECT_EQ((count_misreads<Swizzle128Tile<64, 64>, Major::kMN>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<64, 256>, Major::kMN>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<128, 128>, Major::kMN>(kTileAddr)), 0);
  // 8-bit operands (e4m3), K-major only, k32 steps across 128-column panels.
  EXPECT_EQ((count_misreads<Swizzle128Tile<64, 128, 1>, Major::kK>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<128, 256, 1>, Major::kK>(kTileAddr)), 0);
  EXPECT_EQ((count_misreads<Swizzle128Tile<256, 256, 1>, Major::kK>(kTileAddr)), 0);
}

// The model is not vacuous: a tile off its 1024-byte atom, or the MN-major strides swapped
// (the GPU test's negative control), reads other bytes.
TEST(Sm90Layout, MisplacedOrMisdescribedTilesAreMisread) {
  EXPECT_GT((count_misreads<Swizzle128Tile<64, 64>, Major::kK>(kTileAddr + 128)), 0);
  EXPECT_GT((count_misreads<Swizzle128Tile<64, 128>, Major::kMN>(kTileAddr + 256)), 0);
  EXPECT_GT((count_misreads<Swizzle128Tile<64, 64>, Major::kMN>(kTileAddr, true)), 0);
  EXPECT_GT((count_misreads<Swizzle128Tile<64, 128>, Major::kMN>(kTileAddr, true)), 0);
  EXPECT_GT((count_misreads<Swizzle128Tile<128, 64>, Major::kK>(kTileAddr, true)), 0);
}

TEST(Sm90Layout, DescriptorFields) {
  using Operand = WgmmaOperand<Swizzle128Tile<128, 256>, Major::kMN>;
  const uint64_t desc = Operand::descriptor(0x12400, 3);  // 3 steps of 16 lines: +6144 bytes
  EXPECT_EQ(desc & 0x3FFF, (0x12400u + 6144u) >> 4);
  EXPECT_EQ((desc >> 16) & 0x3FFF, 128u * 128u >> 4);  // LBO: one 64-column panel
  EXPECT_EQ((desc >> 32) & 0x3FFF, 1024u >> 4);        // SBO: one 8-line atom
  EXPECT_EQ(desc >> 62, 1u);
  const uint64_t unused_bits = (3ull << 14) | (3ull << 30) | (0x3Full << 46) | (0x3FFull << 52);
  EXPECT_EQ(desc & unused_bits, 0u);  // base offset (bits 49-51) included: tiles are aligned
}

template <int N>
void expect_accumulator_cover() {
  std::set<std::pair<int, int>> seen;
  for (int thread = 0; thread < 128; ++thread) {
    for (int reg = 0; reg < AccumulatorFragment<N>::kRegisters; ++reg) {
      const FragmentCoord at = AccumulatorFragment<N>::coord(thread, reg);
      ASSERT_TRUE(at.row >= 0 && at.row < 64 && at.col >= 0 && at.col < N);
      ASSERT_TRUE(seen.insert({at.row, at.col}).second) << "thread " << thread << " reg " << reg;
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(64 * N));
}

TEST(Sm90Layout, AccumulatorFragmentCoversTheTileOnce) {
  expect_accumulator_cover<64>();
  expect_accumulator_cover<128>();
  expect_accumulator_cover<256>();
}

TEST(Sm90Layout, RegisterAFragmentCoversTheSliceOnce) {
  std::set<std::pair<int, int>> seen;
  for (int thread = 0; thread < 128; ++thread) {
    for (int reg = 0; reg < RegisterAFragment::kRegisters; ++reg) {
      const FragmentCoord at = RegisterAFragment::coord(thread, reg);
      ASSERT_TRUE(at.row >= 0 && at.row < 64 && at.col >= 0 && at.col + 1 < 16);
      ASSERT_TRUE(seen.insert({at.row, at.col}).second);
      ASSERT_TRUE(seen.insert({at.row, at.col + 1}).second);
    }
  }
  EXPECT_EQ(seen.size(), 64u * 16u);
}

// Accumulator registers 8s .. 8s+7, in pairs, are the A registers of k-step s: what lets a
// score tile feed the next product from registers.
TEST(Sm90Layout, AccumulatorPairsAreRegisterAFragments) {
  for (int thread = 0; thread < 128; ++thread) {
    for (int step = 0; step < 128 / 16; ++step) {
      for (int j = 0; j < 4; ++j) {
        const FragmentCoord lo = AccumulatorFragment<128>::coord(thread, 8 * step + 2 * j);
        const FragmentCoord hi = AccumulatorFragment<128>::coord(thread, 8 * step + 2 * j + 1);
        const FragmentCoord a = RegisterAFragment::coord(thread, j);
        EXPECT_EQ(lo.row, a.row);
        EXPECT_EQ(lo.col, 16 * step + a.col);
        EXPECT_EQ(hi.row, a.row);
        EXPECT_EQ(hi.col, lo.col + 1);
      }
    }
  }
}

// The FP8 forward's P: byte b of e4m3 A register j of k32 step s is the accumulator register
// the mainloop packs there (16s + 8(j/2) + 2(j%2) + 4(b/2) + b%2), which holds the same row and
// the key fp8_key_at gives for that A column; and fp8_key_at permutes each 16 keys.
TEST(Sm90Layout, Fp8AccumulatorQuadsAreRegisterAFragmentsInKeyOrder) {
  for (int base = 0; base < 64; base += 16) {
    std::set<int> keys;
    for (int position = base; position < base + 16; ++position) keys.insert(fp8_key_at(position));
    EXPECT_EQ(keys.size(), 16u);
    EXPECT_EQ(*keys.begin(), base);
    EXPECT_EQ(*keys.rbegin(), base + 15);
  }
  for (int thread = 0; thread < 128; ++thread) {
    for (int step = 0; step < 128 / 32; ++step) {
      for (int j = 0; j < 4; ++j) {
        const FragmentCoord a = RegisterAFragment8::coord(thread, j);
        for (int b = 0; b < 4; ++b) {
          const int reg = 16 * step + 8 * (j / 2) + 2 * (j % 2) + 4 * (b / 2) + b % 2;
          const FragmentCoord d = AccumulatorFragment<128>::coord(thread, reg);
          EXPECT_EQ(d.row, a.row);
          EXPECT_EQ(d.col, 32 * step + fp8_key_at(a.col + b));
        }
      }
    }
  }
}

}  // namespace
