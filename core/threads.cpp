// set_num_threads: one setting for OpenBLAS's pool and seqgrad's OpenMP loops.
#include "seqgrad/core/threads.h"

#include <omp.h>

#include <atomic>

#include "blas.h"
#include "seqgrad/core/error.h"

namespace seqgrad {
namespace {

std::atomic<int>& thread_count() {
    static std::atomic<int> count{[] {
        const int cores = omp_get_num_procs();
        openblas_set_num_threads(cores);
        omp_set_num_threads(cores);
        return cores;
    }()};
    return count;
}

}  // namespace

void set_num_threads(int n) {
    check(n >= 1, "set_num_threads", "the number of threads must be at least 1, got ", n);
    thread_count();  // settle the default first, so it cannot overwrite n later
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
    thread_count() = n;
}

int get_num_threads() { return thread_count(); }

}  // namespace seqgrad
