// parallel_for: seqgrad's own loops over independent rows, split into a few fixed chunks per
// thread of the pool (thread_pool.h). Each index is handled by exactly one thread with the same
// code whatever the split, so results do not depend on the number of threads or on timing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>

#include "seqgrad/core/cpu.h"
#include "seqgrad/core/threads.h"
#include "thread_pool.h"

namespace seqgrad::detail {

// Calls body(begin, end) over [0, n); runs serially when n is below `grain` items per thread.
template <typename Body>
void parallel_for(int64_t n, int64_t grain, const Body& body) {
    ThreadPool& pool = ThreadPool::instance();
    const int64_t most = n / std::max<int64_t>(grain, 1);  // parts of at least `grain` items
    const int64_t threads = std::min<int64_t>(get_num_threads(), most);
    if (threads <= 1 || ThreadPool::in_worker()) {
        if (n > 0) body(int64_t{0}, n);
        return;
    }
    // Settled here, where a refused SEQGRAD_MAX_CPU_ISA can throw: not on a worker, where a throw
    // would end the program.
    isa_level();
    // Up to kPartsPerThread parts a thread of at least `grain` items each, so that a thread done
    // with its own takes a slower one's; the parts, and so the results, depend only on n, grain
    // and the thread count. As many parts for every thread: three on two threads would leave one
    // thread two thirds of the work while no thread is slower than the other. Their sizes differ
    // by one at most, so none is below the grain (parts <= most).
    int64_t parts = std::min(threads * ThreadPool::kPartsPerThread, most);
    parts -= parts % threads;
    pool.run(parts, [&](int64_t t) { body(t * n / parts, (t + 1) * n / parts); });
}

// The first failure among work spread over the pool's threads, which carry no exceptions (a throw
// on a worker would end the program): each piece runs through run(), and the caller throws after
// the work if message() is not empty.
class FirstFailure {
public:
    template <typename Work>
    void run(Work&& work) noexcept {
        try {
            work();
        } catch (const std::exception& e) {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (message_.empty()) message_ = e.what();
        }
    }
    const std::string& message() const { return message_; }

private:
    std::mutex mutex_;
    std::string message_;
};

}  // namespace seqgrad::detail
