#include "onednn.h"

#ifdef SEQGRAD_HAVE_DNNL
#include <dlfcn.h>

namespace seqgrad::detail {

dnnl::engine& onednn_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

// The symbol comes with libgomp, which libdnnl loads, so it is looked up rather than linked (no
// OpenMP flags for any compiler).
void onednn_on_this_thread() {
    thread_local bool done = false;
    if (done) return;
    done = true;
    using SetThreads = void (*)(int);
    if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) set(1);
}

}  // namespace seqgrad::detail
#endif
