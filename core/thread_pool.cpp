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
    const std::lock_guard<std::mutex> turn(turn_);  // after the job running now, if any
    if (threads < 1) threads = 1;
    if (threads == size()) return;
    stop_workers();
    stopping_ = false;
    // A worker starts from the generation current now: a job posted before its thread runs is
    // still one it has not seen.
    const uint64_t start = generation_.load();
    claimed_ = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(threads) * kPartsPerThread);
    for (auto& c : claimed_) c.store(start);
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
    const auto serially = [&] {
        for (int64_t t = 0; t < n; ++t) job(t);
    };
    if (n <= 1 || t_in_job) return serially();
    std::unique_lock<std::mutex> turn(turn_, std::try_to_lock);
    // Another thread's job, or fewer threads since.
    if (!turn.owns_lock() || n > static_cast<int64_t>(size()) * kPartsPerThread) return serially();
    uint64_t generation;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &job;
        parts_ = n;
        pending_ = n;
        generation = ++generation_;
    }
    wake_.notify_all();
    t_in_job = true;
    for (int64_t part; (part = claim(0, generation, n)) >= 0;) {
        job(part);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    t_in_job = false;
    for (int spin = 0; spin < kSpins && pending_.load(std::memory_order_acquire) > 0; ++spin) _mm_pause();
    if (pending_.load(std::memory_order_acquire) > 0) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return pending_.load() == 0; });
    }
}

int64_t ThreadPool::claim(int64_t own, uint64_t generation, int64_t parts) {
    // Each part holds the generation of the last job that took it. The parts lie in one run of
    // `per` a thread (thread t's from t * per): a thread takes its own in order, then any other the
    // job's threads have not started, from the end of each other thread's run back, so that a
    // slower thread keeps the parts next to the one it is on. A worker without parts of its own
    // takes none, and one still holding an older job's generation takes nothing, as that job's
    // parts were all taken before it ended.
    const int64_t threads = size();
    const int64_t per = (parts + threads - 1) / threads;
    if (own * per >= parts) return -1;
    const auto take = [&](int64_t part) {
        uint64_t last = claimed_[part].load(std::memory_order_acquire);
        while (last < generation)
            if (claimed_[part].compare_exchange_weak(last, generation, std::memory_order_acq_rel)) return true;
        return false;
    };
    for (int64_t i = 0; i < threads; ++i) {
        const int64_t other = (own + i) % threads;
        const int64_t first = other * per, end = std::min(parts, first + per);
        if (other == own) {
            for (int64_t part = first; part < end; ++part)
                if (take(part)) return part;
        } else {
            for (int64_t part = end - 1; part >= first; --part)
                if (take(part)) return part;
        }
    }
    return -1;
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
        t_in_job = true;
        for (int64_t part; (part = claim(index, seen, parts)) >= 0;) {
            (*job)(part);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard<std::mutex> lock(mutex_);
                done_.notify_one();
            }
        }
        t_in_job = false;
    }
}

}  // namespace seqgrad::detail
