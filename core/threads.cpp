// set_num_threads: the size of seqgrad's thread pool. OpenBLAS always runs single-threaded inside
// each call; seqgrad splits large products and batches of small ones across the pool itself, so
// the two never compete for the cores.
#include "seqgrad/core/threads.h"

#include <thread>

#include "blas.h"
#include "parallel.h"
#include "seqgrad/core/error.h"
#include "thread_pool.h"

namespace seqgrad {
namespace {

int& thread_count() {
    static int count = [] {
        openblas_set_num_threads(1);
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        detail::ThreadPool::instance().resize(cores);
        return cores;
    }();
    return count;
}

}  // namespace

void set_num_threads(int n) {
    check(n >= 1, "set_num_threads", "the number of threads must be at least 1, got ", n);
    thread_count();  // settle the default first, so it cannot overwrite n later
    detail::ThreadPool::instance().resize(n);
    thread_count() = n;
}

int get_num_threads() { return thread_count(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body) {
    detail::parallel_for(n, grain, body);
}

}  // namespace seqgrad
