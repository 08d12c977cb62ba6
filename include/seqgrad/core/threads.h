// One knob for all parallelism: OpenBLAS's threads and seqgrad's own loops. Work is split into
// fixed static chunks, so a result is bit-identical run to run for a given thread count.
#pragma once

#include <cstdint>

namespace seqgrad {

void set_num_threads(int n);  // n >= 1; the default is the number of cores
int get_num_threads();

}  // namespace seqgrad
