// set_num_threads governs all parallel work, and results are bit-identical run to run; parallel_for
// and parallel_shares (core/parallel.h) run each item once, and a thread done early helps a slow one.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "helpers.h"

#include "../core/parallel.h"

using namespace seqgrad;
using testing::ThreadCountScope;

namespace {

std::vector<float> step_gradients() {
    Generator gen(11);
    auto w = Tensor::uniform({256, 128}, -0.1f, 0.1f, gen, true);
    auto gamma = Tensor::ones({256}, true);
    auto beta = Tensor::zeros({256}, true);
    auto x = Tensor::uniform({64, 20, 128}, -1.0f, 1.0f, gen);
    std::vector<int64_t> ids(64 * 20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(gen.below(256));
    auto h = layer_norm(tanh(linear(x, w, Tensor())), gamma, beta, 1e-6f);
    auto loss = cross_entropy(softmax(h, -1) * 10.0f, IntTensor::from_vector(ids, {64, 20}), 0, 0.1f);
    loss.backward();
    std::vector<float> out = w.grad().to_vector();
    for (float v : gamma.grad().to_vector()) out.push_back(v);
    out.push_back(loss.item());
    return out;
}

// Runs f on two threads of the caller's at once, with a pool of two threads.
void on_two_threads_at_once(const std::function<void()>& f) {
    const ThreadCountScope scope(2);
    std::thread first(f), second(f);
    first.join();
    second.join();
}

}  // namespace

TEST_CASE("set_num_threads sets the count and rejects zero", "[threads]") {
    const ThreadCountScope scope(1);
    CHECK(get_num_threads() == 1);
    CHECK_THROWS_AS(set_num_threads(0), Error);
}

TEST_CASE("results are bit-identical run to run for a fixed thread count", "[threads]") {
    const ThreadCountScope restore;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        const auto first = step_gradients();
        const auto second = step_gradients();
        CHECK(first == second);
    }
}

TEST_CASE("parallel_for runs each index once, job after job, with more threads than cores", "[threads]") {
    // A thread done with its own parts takes any part not yet started (a worker late to come, as
    // when the cores are busy): with more threads than cores that happens often. Every index must
    // still run exactly once, on one thread, in every job, and no job may see another's parts.
    const int threads = static_cast<int>(std::max(4u, 2 * std::thread::hardware_concurrency()));
    const ThreadCountScope scope(threads);
    constexpr int64_t kJobs = 20000;
    const int64_t most = int64_t{threads} * 5;  // past the parts a job may have, kPartsPerThread a thread
    std::vector<std::atomic<int>> runs(static_cast<size_t>(most));
    int64_t wrong = 0;
    for (int64_t job = 0; job < kJobs; ++job) {
        const int64_t n = 2 + job % (most - 1);  // 2 .. most indices, up to several a thread
        for (auto& r : runs) r.store(0, std::memory_order_relaxed);
        parallel_for(n, 1, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        });
        for (int64_t i = 0; i < most; ++i) wrong += runs[static_cast<size_t>(i)].load() != (i < n ? 1 : 0);
    }
    CHECK(wrong == 0);
}

TEST_CASE("parallel_for: a thread done with its own parts takes a slower thread's", "[threads]") {
    // Two threads, eight indices of one part each: the calling thread's run is 0-3, the worker's
    // 4-7. Index 4, the worker's first, stays busy until 5, 6 and 7 are done: only another thread
    // taking them ends the wait early (one fixed share a thread would run them after 4, on the
    // thread stuck on it). A core shared with other work, or a small core of a hybrid CPU, is
    // such a slow thread.
    const ThreadCountScope scope(2);
    std::atomic<int> later_done{0};
    std::atomic<bool> waited_out{false};
    parallel_for(8, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            if (i == 4) {
                const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                while (later_done.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
                waited_out = later_done.load() < 3;
            } else if (i > 4) {
                later_done.fetch_add(1);
            }
        }
    });
    CHECK(later_done.load() == 3);
    CHECK_FALSE(waited_out.load());
}

TEST_CASE("a worker asleep between jobs wakes for the next, and a caller asleep wakes when it ends", "[threads]") {
    // Pauses between jobs long enough for the worker to stop spinning and sleep. The two parts of
    // each job wait for each other, so they must run at once, on two threads: a worker that
    // missed its wake-up would leave part 0 waiting out its deadline. Part 1 then takes 20 ms,
    // long enough for the calling thread, done with part 0, to sleep too until the worker ends.
    const ThreadCountScope scope(2);
    int timed_out = 0, unfinished = 0;
    for (int job = 0; job < 5; ++job) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        std::atomic<int> started{0}, finished{0};
        std::atomic<bool> late{false};
        parallel_for(2, 1, [&](int64_t begin, int64_t) {
            ++started;
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
            if (started.load() < 2) late = true;
            if (begin == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            ++finished;
        });
        timed_out += late.load();
        unfinished += finished.load() != 2;
    }
    CHECK(timed_out == 0);
    CHECK(unfinished == 0);
}

TEST_CASE("parallel_shares runs each item of every share once, job after job", "[threads]") {
    // Threads take their own shares from the front and others' from the back: with more threads
    // than cores, threads come late and the two ends meet often. No item may run twice or never.
    const int threads = static_cast<int>(std::max(4u, 2 * std::thread::hardware_concurrency()));
    const ThreadCountScope scope(threads);
    constexpr int64_t kJobs = 5000;
    std::vector<std::vector<std::atomic<int>>> runs;
    for (int s = 0; s < 20; ++s) runs.emplace_back(40);  // up to 20 shares of up to 40 items
    int64_t wrong = 0;
    for (int64_t job = 0; job < kJobs; ++job) {
        std::vector<int64_t> sizes(static_cast<size_t>(1 + job % 20));
        for (size_t s = 0; s < sizes.size(); ++s) sizes[s] = static_cast<int64_t>((job * 7 + s * 13) % 41);
        for (auto& share : runs)
            for (auto& r : share) r.store(0, std::memory_order_relaxed);
        detail::parallel_shares(sizes, [&](int64_t s, int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                runs[static_cast<size_t>(s)][static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
        });
        for (size_t s = 0; s < runs.size(); ++s)
            for (int64_t i = 0; i < 40; ++i)
                wrong += runs[s][static_cast<size_t>(i)].load() != (s < sizes.size() && i < sizes[s] ? 1 : 0);
    }
    CHECK(wrong == 0);
}

TEST_CASE("parallel_shares: a thread done with its own share takes a slower share's last items", "[threads]") {
    // Two shares of eight items on two threads. The thread on share 1 takes its first half, 0-3,
    // and item 0 stays busy until 4-7, the half it has not taken, are done: only the thread done
    // with share 0 taking them from the back ends the wait early. (Share 0's first item waits for
    // share 1 to start, so that the calling thread cannot run both shares before the worker
    // comes, as the pool lets it when the worker is late.)
    const ThreadCountScope scope(2);
    std::atomic<bool> share1_started{false};
    std::atomic<int> later_done{0};
    std::atomic<bool> waited_out{false};
    const auto wait_for = [](const std::function<bool()>& done) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        return done();
    };
    const std::vector<int64_t> sizes{8, 8};
    detail::parallel_shares(sizes, [&](int64_t s, int64_t begin, int64_t end) {
        if (s == 1 && begin == 0) share1_started = true;
        for (int64_t i = begin; i < end; ++i) {
            if (s == 0 && i == 0) {
                wait_for([&] { return share1_started.load(); });
            } else if (s == 1 && i == 0) {
                waited_out = !wait_for([&] { return later_done.load() == 4; });
            } else if (s == 1 && i >= 4) {
                later_done.fetch_add(1);
            }
        }
    });
    CHECK(share1_started.load());
    CHECK(later_done.load() == 4);
    CHECK_FALSE(waited_out.load());
}

TEST_CASE("balanced_grain: parts of `least` items where there are enough, else a share a thread", "[threads]") {
    const ThreadCountScope scope(2);
    CHECK(balanced_grain(100, 4) == 4);  // 25 parts at most, parallel_for keeps 8: two runs of four a thread
    CHECK(balanced_grain(6, 4) == 3);    // fewer than 4 a thread: one part of 3 a thread
    CHECK(balanced_grain(1, 4) == 1);
    CHECK(balanced_grain(100, 0) == 1);  // no least: any part size
    // A loop so cut runs each index once, in parts of at least the grain where it has them.
    std::vector<std::atomic<int>> seen(37);
    std::atomic<int64_t> smallest{1000};
    parallel_for(37, balanced_grain(37, 4), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
        int64_t was = smallest.load();
        while (end - begin < was && !smallest.compare_exchange_weak(was, end - begin)) {}
    });
    for (const auto& count : seen) CHECK(count.load() == 1);
    CHECK(smallest.load() >= 4);
}

TEST_CASE("parallel_for gives every thread as many parts, and as many items", "[threads]") {
    // 12 items at a grain of 4 on two threads: three parts would leave one thread 8 items and the
    // other 4; two parts of 6 give each its half. 28 items: six parts of 4 or 5, not seven.
    const ThreadCountScope scope(2);
    for (const auto& [n, expected] : std::vector<std::pair<int64_t, size_t>>{{12, 2}, {20, 4}, {28, 6}, {100, 8}}) {
        std::mutex mutex;
        std::vector<std::pair<int64_t, int64_t>> parts;
        parallel_for(n, 4, [&](int64_t begin, int64_t end) {
            const std::lock_guard<std::mutex> lock(mutex);
            parts.emplace_back(begin, end);
        });
        CAPTURE(n);
        CHECK(parts.size() == expected);
        for (const auto& [begin, end] : parts) CHECK(end - begin >= 4);
    }
}

TEST_CASE("parallel_for called from two of the caller's threads at once runs each index once", "[threads]") {
    // A server may run a translator on one thread and a classifier on another: both split their
    // work across the one pool. Each call must still run every index of its own job exactly once.
    constexpr int64_t kJobs = 20000, kIndices = 64;
    std::atomic<int64_t> wrong{0};
    on_two_threads_at_once([&] {
        std::vector<std::atomic<int>> runs(static_cast<size_t>(kIndices));
        for (int64_t job = 0; job < kJobs; ++job) {
            for (auto& r : runs) r.store(0, std::memory_order_relaxed);
            parallel_for(kIndices, 1, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i)
                    runs[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
            });
            for (const auto& r : runs) wrong += r.load() != 1;
        }
    });
    CHECK(wrong == 0);
}

TEST_CASE("two of the caller's threads computing gradients at once get one thread's results", "[threads]") {
    // Whichever thread has the pool's workers, the other runs the same parts alone: the same sums
    // in the same order, so the same bits as a call made with nothing else running.
    std::vector<float> alone;
    {
        const ThreadCountScope scope(2);
        alone = step_gradients();
    }
    std::atomic<int> differ{0};
    on_two_threads_at_once([&] {
        for (int i = 0; i < 10; ++i) differ += step_gradients() != alone;
    });
    CHECK(differ == 0);
}

TEST_CASE("set_num_threads from another thread waits for the parallel work running then", "[threads]") {
    // Part 0 runs on the calling thread and ends last: if the pool were resized under it, its
    // search for parts not yet started would read the new, smaller pool's records.
    const ThreadCountScope scope(2);
    std::vector<std::atomic<int>> runs(2);
    std::atomic<int> started{0};
    std::thread caller([&] {
        parallel_for(2, 1, [&](int64_t begin, int64_t end) {
            ++started;
            std::this_thread::sleep_for(std::chrono::milliseconds(begin == 0 ? 400 : 100));
            for (int64_t i = begin; i < end; ++i) runs[static_cast<size_t>(i)].fetch_add(1);
        });
    });
    while (started < 2) std::this_thread::yield();
    set_num_threads(1);  // stops the pool's worker, once the job above is done
    caller.join();
    CHECK(runs[0] == 1);
    CHECK(runs[1] == 1);
    CHECK(get_num_threads() == 1);
}
