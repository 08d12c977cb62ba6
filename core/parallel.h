// parallel_for: seqgrad's own loops over independent rows, split into a few fixed chunks per
// thread of the pool (thread_pool.h). Each index is handled by exactly one thread with the same
// code whatever the split, so results do not depend on the number of threads or on timing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>

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

// Items [0, n), n below 2^32, that one thread takes from the front and others from the back, each
// item once.
class alignas(64) SharedRange {
public:
    void reset(int64_t n) { ends_.store(static_cast<uint64_t>(n) << 32, std::memory_order_relaxed); }
    // Half of the items left (at least one) from the front, as [begin, end); begin == end when
    // none is left. Halving keeps the owner's runs of items long while the back is still there
    // for others to take.
    std::pair<int64_t, int64_t> take_front_half() {
        uint64_t now = ends_.load(std::memory_order_relaxed);
        for (;;) {
            const uint64_t front = now & 0xffffffffu, back = now >> 32;
            if (front >= back) return {0, 0};
            const uint64_t end = front + std::max<uint64_t>(1, (back - front) / 2);
            if (ends_.compare_exchange_weak(now, (back << 32) | end, std::memory_order_relaxed))
                return {static_cast<int64_t>(front), static_cast<int64_t>(end)};
        }
    }
    // The last item left, or -1 when none is.
    int64_t take_back() {
        uint64_t now = ends_.load(std::memory_order_relaxed);
        for (;;) {
            const uint64_t front = now & 0xffffffffu, back = now >> 32;
            if (front >= back) return -1;
            if (ends_.compare_exchange_weak(now, ((back - 1) << 32) | front, std::memory_order_relaxed))
                return static_cast<int64_t>(back - 1);
        }
    }

private:
    std::atomic<uint64_t> ends_{0};  // [front, back): front in the low 32 bits, back in the high 32
};

// body(s, begin, end) over items [begin, end) of `sizes.size()` shares, share s holding items
// [0, sizes[s]), each item exactly once: for work cut in one share a thread (a product's columns,
// each thread's block of them packed apart). The shares are parts of one parallel_for; each
// thread takes its shares' items from the front, half of those left at a time, then any other
// share's from the back, one at a time, so that a share on a slower or busier core (a small core
// of a hybrid CPU, a core shared with other work) does not hold the rest up. Which thread runs an
// item depends on timing, so body's results must not.
template <typename Body>
void parallel_shares(std::span<const int64_t> sizes, const Body& body) {
    const auto shares = static_cast<int64_t>(sizes.size());
    constexpr int64_t kOnStack = 16;
    SharedRange on_stack[kOnStack];
    std::unique_ptr<SharedRange[]> on_heap;
    SharedRange* ranges = on_stack;
    if (shares > kOnStack) {
        on_heap = std::make_unique<SharedRange[]>(static_cast<size_t>(shares));
        ranges = on_heap.get();
    }
    for (int64_t s = 0; s < shares; ++s) ranges[s].reset(sizes[static_cast<size_t>(s)]);
    parallel_for(shares, 1, [&](int64_t first, int64_t end) {
        for (int64_t s = first; s < end; ++s)
            for (auto [b, e] = ranges[s].take_front_half(); b < e; std::tie(b, e) = ranges[s].take_front_half())
                body(s, b, e);
        for (int64_t o = 0; o < shares; ++o) {
            const int64_t s = (end + o) % shares;
            for (int64_t i; (i = ranges[s].take_back()) >= 0;) body(s, i, i + 1);
        }
    });
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
