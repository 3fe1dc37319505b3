// Everything the per-ISA kernel headers depend on. An ISA translation unit includes this
// before its target region (#pragma GCC target, or clang's attribute push), so these
// headers' inline functions are compiled for the baseline ISA: the linker keeps one copy
// of each, and it must run on every CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/mask.hpp"
#include "core/numeric.hpp"
#include "core/params.hpp"
#include "core/philox.hpp"
#include "core/softmax_state.hpp"
#include "cpu/tiled/kernel_set.hpp"
#include "cpu/tiled/sequence.hpp"
