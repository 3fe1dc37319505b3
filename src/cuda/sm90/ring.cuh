// A position in a ring of shared-memory buffers that a producer fills and consumers drain,
// each buffer guarded by a "full" and an "empty" mbarrier (sm90/mbarrier.cuh). Producer and
// consumers walk the same sequence of positions: buffer `slot`, in its `phase`-th use (mod 2).
// A consumer waits for the full barrier's phase of that parity; the producer waits for the
// empty barrier's previous phase, which a fresh barrier counts as complete, so the first
// round of the ring needs no release.
#pragma once

#include <cstdint>

namespace flashattn::cuda::sm90 {

template <int Stages>
struct RingPosition {
  int slot = 0;
  uint32_t phase = 0;

  __device__ __forceinline__ void advance() {
    if (++slot == Stages) {
      slot = 0;
      phase ^= 1;
    }
  }
  // The parity a consumer waits for on `full`, and the producer on `empty`.
  __device__ __forceinline__ uint32_t full_parity() const { return phase; }
  __device__ __forceinline__ uint32_t empty_parity() const { return phase ^ 1; }
};

}  // namespace flashattn::cuda::sm90
