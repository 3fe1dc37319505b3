// flashattn-bench --mode decode: forward_kvcache over a full cache of --cache-len keys per
// batch entry (contiguous, or paged through a shuffled block table), timed like the forward
// and reported with the effective bandwidth: bytes of K and V read / time.
#pragma once

#include "options.hpp"

namespace fa_bench {

int run_decode(const Options& options);

}  // namespace fa_bench
