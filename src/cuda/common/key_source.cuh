// Where fwd_kernel reads its K and V rows: the compile-time key source of the kernel.
//   ContiguousKeys: key j of a sequence is row j of its K/V operands (the plain forward).
//   PagedKeys: key j of batch entry b is row j % page_size of page block_table[b][j / page_size]
//     (a paged KV cache after the append; the operands' batch_stride is the page stride).
//
// Paged addressing. page_size is a multiple of 16, and every 16-key group starts at a multiple
// of 16, so a group never crosses a page: one entry per group, {page, in-page row of the
// group's first key}, locates all its rows. The entries of a key block live in a two-slot ring
// in shared memory (slot = block % 2), 64 bytes for 64-key blocks. The page index travels
// from block_table to shared memory by cp.async in the commit group of an earlier K/V load,
// so no thread waits on it and no page index stays in a register across the mainloop; each
// copy pass computes its row address from its group's entry (one shared load and a wide
// multiply-add), so nothing per row is kept between blocks either.
#pragma once

#include <cstdint>

#include "cuda/prim/cp_async.cuh"
#include "cuda/common/smem_tile.cuh"
#include "cuda/common/tile_copy.cuh"

namespace flashattn::cuda {

struct ContiguousKeys {
  static constexpr bool kPaged = false;
  static constexpr int table_bytes(int /*block_n*/) { return 0; }
};

struct PagedKeys {
  static constexpr bool kPaged = true;
  static constexpr int kGroupRows = 16;
  static constexpr int kSlots = 2;

  const int32_t* block_table;  // [batch][max_pages] page indices
  int64_t table_batch_stride;
  int page_size;   // a multiple of 16
  int page_shift;  // log2(page_size) when it is a power of two (no division), else -1

  static constexpr int table_bytes(int block_n) {
    return kSlots * (block_n / kGroupRows) * kEntryBytes;
  }

  // Shared address of the entry {page, in-page row} of group g of key block n in the ring at
  // `table` (32-bit shared addresses: a generic pointer would hold two registers).
  template <int BlockN>
  static __device__ __forceinline__ uint32_t entry(uint32_t table, int n, int g) {
    return table + ((n % kSlots) * (BlockN / kGroupRows) + g) * kEntryBytes;
  }

  static __device__ __forceinline__ int2 load_entry(uint32_t addr) {
    int2 e;
    asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];\n" : "=r"(e.x), "=r"(e.y) : "r"(addr));
    return e;
  }

  // Writes the entry of group g of key block n when the group holds a key below seqlen_k
  // (the others are never read: their rows are zero-filled). Async: the page index comes by
  // cp.async in the caller's next commit group; else by a plain load. Either way the entry is
  // visible to the other threads after the writer's wait and a barrier.
  template <int BlockN>
  __device__ __forceinline__ void fetch(uint32_t table, int b, int n, int g, int seqlen_k,
                                        bool async) const {
    const int key = n * BlockN + g * kGroupRows;
    if (key >= seqlen_k) return;
    const int index = page_shift >= 0 ? key >> page_shift : key / page_size;
    const int32_t* page = block_table + b * table_batch_stride + index;
    const uint32_t e = entry<BlockN>(table, n, g);
    const int in_page = key - index * page_size;
    if (async) {
      // 4 bytes through L1 (.ca: .cg copies only 16); a commit group like the K/V copies.
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(e), "l"(page));
      asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(e + 4), "r"(in_page) : "memory");
    } else {
      asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(e), "r"(*page), "r"(in_page)
                   : "memory");
    }
  }

  // Every group entry of key block n, by the first BlockN / 16 threads.
  template <int BlockN>
  __device__ __forceinline__ void fetch_block(uint32_t table, int b, int n, int seqlen_k, int tid,
                                              bool async) const {
    if (tid < BlockN / kGroupRows) fetch<BlockN>(table, b, n, tid, seqlen_k, async);
  }

 private:
  static constexpr int kEntryBytes = 8;
};

namespace block {

// tile_copy.cuh's walk (same thread-to-chunk map, same shared-memory placement) for key block
// n of a paged operand: `gmem` is the operand at page 0, row 0 of this KV head; row r of the
// block comes from its group's entry. Rows at or past `rows_valid` are zero-filled unread.
// The strides are 32-bit (the caller checks page_stride and page_size * row_stride fit), so
// a row address is one wide multiply-add from its entry.
template <int Rows, int D, int Threads, class T>
__device__ __forceinline__ void copy_paged_tile_async(uint32_t smem_base, const T* gmem,
                                                      int page_stride, int row_stride,
                                                      uint32_t table, int n,
                                                      int rows_valid, int tid) {
  using Walk = TileCopyWalk<Rows, D, Threads>;
  constexpr int kPanel = Walk::kPanel;
  constexpr int kRowsPerPass = Walk::kRowsPerPass;
  constexpr int kGroupRows = PagedKeys::kGroupRows;
  static_assert(kRowsPerPass % kGroupRows == 0, "a pass must cover whole 16-row groups");
  const Walk walk(tid);
  const int row = walk.row;
  const int chunk = walk.chunk;
  const uint32_t dst = smem_base + walk.dst_bytes;
  // Every pass keeps the thread's row within its group (kRowsPerPass % 16 == 0).
  const T* const thread_gmem = gmem + (row % kGroupRows) * row_stride + chunk * 8;
#pragma unroll
  for (int i = 0; i < Rows / kRowsPerPass; ++i) {
    const int r = row + i * kRowsPerPass;
    const bool valid = r < rows_valid;
    // Rows past the keys read nothing; their group's entry was never written.
    const T* src = thread_gmem;
    if (valid) {
      const int2 e = PagedKeys::load_entry(PagedKeys::entry<Rows>(table, n, r / kGroupRows));
      src = thread_gmem + static_cast<int64_t>(e.x) * page_stride + e.y * row_stride;
    }
#pragma unroll
    for (int panel = 0; panel < D / kPanel; ++panel) {
      prim::thread::cp_async_16(dst + Walk::step_bytes(panel, i), src + panel * kPanel, valid);
    }
  }
}

}  // namespace block
}  // namespace flashattn::cuda
