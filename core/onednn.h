// What the two users of oneDNN in core (packed weights, packed.cpp; bfloat16 products, bf16.cpp)
// share: the CPU engine, and keeping each call on the thread that makes it.
#pragma once

#ifdef SEQGRAD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>

namespace seqgrad::detail {

dnnl::engine& onednn_engine();

// oneDNN is built with OpenMP here and sizes its team by omp_get_max_threads() of the calling
// thread. This sets that to 1 (once per thread), so that a product runs on its caller alone and
// seqgrad's pool, not a second team of threads, spreads the work over the cores, as with sgemm.
void onednn_on_this_thread();

}  // namespace seqgrad::detail
#endif
