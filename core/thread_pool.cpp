// ThreadPool: a fixed set of workers woken per job by a generation counter.
#include "thread_pool.h"

#include <immintrin.h>

namespace seqgrad::detail {
namespace {

thread_local bool t_in_job = false;

// Iterations of busy waiting before sleeping: a few microseconds, enough to catch the next job
// of a training step without paying a wake-up, short enough to be invisible when idle.
constexpr int kSpins = 4000;

}  // namespace

ThreadPool& ThreadPool::instance() {
    static ThreadPool* pool = new ThreadPool;  // never destroyed: workers may outlive static objects
    return *pool;
}

bool ThreadPool::in_worker() { return t_in_job; }

void ThreadPool::resize(int threads) {
    if (threads < 1) threads = 1;
    if (threads == size()) return;
    stop_workers();
    stopping_ = false;
    // A worker starts from the generation current now: a job posted before its thread runs is
    // still one it has not seen.
    const uint64_t start = generation_.load();
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i, start] { worker_loop(i, start); });
}

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        generation_++;
    }
    wake_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& job) {
    if (n <= 1 || t_in_job || workers_.empty()) {
        for (int64_t t = 0; t < n; ++t) job(t);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        parts_ = n;
        pending_ = n - 1;
        generation_++;
    }
    wake_.notify_all();
    t_in_job = true;
    job(0);
    t_in_job = false;
    for (int spin = 0; spin < kSpins && pending_.load(std::memory_order_acquire) > 0; ++spin) _mm_pause();
    if (pending_.load(std::memory_order_acquire) > 0) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_.load() == 0; });
    }
}

void ThreadPool::worker_loop(int index, uint64_t seen) {
    for (;;) {
        for (int spin = 0; spin < kSpins && generation_.load(std::memory_order_acquire) == seen; ++spin) _mm_pause();
        const std::function<void(int64_t)>* job;
        int64_t parts;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return generation_.load() != seen; });
            seen = generation_.load();
            if (stopping_) return;
            job = job_;
            parts = parts_;
        }
        if (index < parts) {
            t_in_job = true;
            (*job)(index);
            t_in_job = false;
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lock(mutex_);
                done_.notify_one();
            }
        }
    }
}

}  // namespace seqgrad::detail
