// The one pool of worker threads behind all of seqgrad's parallel work (its own loops and the
// splitting of matrix products; OpenBLAS itself runs single-threaded inside each piece). Workers
// spin briefly for the next job, then sleep, so an idle pool costs nothing and never fights the
// caller, OpenBLAS or other processes for the cores. Internal to core/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace seqgrad::detail {

class ThreadPool {
public:
    static ThreadPool& instance();

    // Parts a job may have for each thread: a thread done with its own takes those of a slower one
    // (a core shared with other work, or a smaller core of a hybrid CPU) instead of waiting.
    static constexpr int kPartsPerThread = 4;

    // Runs job(t) for t in [0, n): the parts in one run a thread, in order (the calling thread's
    // first, then worker 1's, ...), except that a thread done with its own takes any other not yet
    // started, so a worker late to come or slower (the cores busy with other work) is not waited
    // for; returns when all are done. Called from inside a job, or with n above size() x
    // kPartsPerThread, it runs serially; so it does on a thread of the caller's while another of
    // its threads has the workers (two models used from two threads at once): the same parts, so
    // the same results, on that thread alone.
    void run(int64_t n, const std::function<void(int64_t)>& job);
    int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller counts
    void resize(int threads);
    static bool in_worker();  // true inside a job, where nested parallelism runs serially

    ~ThreadPool();

private:
    ThreadPool() = default;
    void worker_loop(int index, uint64_t seen);
    int64_t claim(int64_t own, uint64_t generation, int64_t parts);  // a part of that job to run, or -1
    void stop_workers();

    std::vector<std::thread> workers_;
    std::mutex turn_;  // held by the outside thread whose job the workers run, and by resize()
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    const std::function<void(int64_t)>* job_ = nullptr;
    int64_t parts_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int64_t> pending_{0};             // parts not finished
    std::vector<std::atomic<uint64_t>> claimed_;  // for each part, the generation of the job that took it
    bool stopping_ = false;
};

}  // namespace seqgrad::detail
