// parallel_for: seqgrad's own loops over independent rows, split into one static chunk per
// thread (OpenMP). Each index is handled by exactly one thread with the same code whatever the
// split, so results do not depend on the number of threads or on timing.
#pragma once

#include <algorithm>
#include <cstdint>

#include <omp.h>

#include "seqgrad/core/threads.h"

namespace seqgrad::detail {

// Calls body(begin, end) over [0, n); runs serially when n is below `grain` items per thread.
template <typename Body>
void parallel_for(int64_t n, int64_t grain, const Body& body) {
    const int64_t max_threads = get_num_threads();
    const int64_t threads = std::min<int64_t>(max_threads, n / std::max<int64_t>(grain, 1));
    if (threads <= 1 || omp_in_parallel()) {
        if (n > 0) body(int64_t{0}, n);
        return;
    }
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
        const int64_t t = omp_get_thread_num();
        const int64_t chunk = (n + threads - 1) / threads;
        const int64_t begin = t * chunk;
        const int64_t end = std::min(n, begin + chunk);
        if (begin < end) body(begin, end);
    }
}

}  // namespace seqgrad::detail
