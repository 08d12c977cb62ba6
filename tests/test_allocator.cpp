// The caching allocator: a repeated forward/backward loop reaches a steady state in which no
// step asks the system for memory, and requests reuse free blocks of up to twice their size.
#include "helpers.h"

using namespace seqgrad;

TEST_CASE("a repeated training step allocates nothing new from the system after warm-up", "[allocator]") {
    Generator gen(7);
    auto w1 = Tensor::uniform({32, 16}, -0.3f, 0.3f, gen, true);
    auto b1 = Tensor::zeros({32}, true);
    auto w2 = Tensor::uniform({10, 32}, -0.3f, 0.3f, gen, true);
    auto gamma = Tensor::ones({32}, true);
    auto beta = Tensor::zeros({32}, true);
    auto x = Tensor::uniform({8, 5, 16}, -1.0f, 1.0f, gen);
    auto targets = IntTensor::from_vector(std::vector<int64_t>(40, 3), {8, 5});
    auto step = [&] {
        auto h = gelu(layer_norm(linear(x, w1, b1), gamma, beta, 1e-6f));
        auto logits = matmul(h, w2, false, true);
        auto loss = cross_entropy(softmax(logits, -1) * 3.0f, targets, 0, 0.1f);
        loss.backward();
        for (Tensor* p : {&w1, &b1, &w2, &gamma, &beta}) p->zero_grad();
    };
    step();
    step();
    const AllocatorStats warm = allocator_stats();
    for (int i = 0; i < 5; ++i) step();
    const AllocatorStats after = allocator_stats();
    CHECK(after.system_allocations == warm.system_allocations);
    CHECK(after.cache_hits > warm.cache_hits);
}

TEST_CASE("freed blocks are cached, counted and returned by empty_cache", "[allocator]") {
    empty_cache();
    const AllocatorStats start = allocator_stats();
    { auto t = Tensor::zeros({1000}); }
    const AllocatorStats freed = allocator_stats();
    CHECK(freed.bytes_cached >= 4000);
    CHECK(freed.bytes_in_use == start.bytes_in_use);
    { auto t = Tensor::zeros({1000}); }
    CHECK(allocator_stats().system_allocations == freed.system_allocations);
    empty_cache();
    CHECK(allocator_stats().bytes_cached == 0);
}

TEST_CASE("a request takes a free block up to twice its size before asking the system", "[allocator]") {
    empty_cache();
    { auto big = Tensor::zeros({100000}); }  // a 400,000-byte request: a 458,752-byte block
    const AllocatorStats cached = allocator_stats();
    {
        auto smaller = Tensor::zeros({60000});  // 240,000 bytes: a 262,144-byte list, empty
        CHECK(allocator_stats().system_allocations == cached.system_allocations);
        CHECK(allocator_stats().bytes_cached == cached.bytes_cached - 458752);
        auto much_smaller = Tensor::zeros({10000});  // 40,000 bytes: the big block is in use anyway
        CHECK(allocator_stats().system_allocations == cached.system_allocations + 1);
    }
    // Both blocks are back, each under its own size; a request more than twice smaller than the
    // big block does not take it.
    CHECK(allocator_stats().bytes_cached == cached.bytes_cached + 40960);
    { auto tiny = Tensor::zeros({10}); }
    CHECK(allocator_stats().system_allocations == cached.system_allocations + 2);
    empty_cache();
}

TEST_CASE("storage is 64-byte aligned", "[allocator]") {
    for (int64_t n : {1, 3, 17, 1000, 123457}) {
        auto t = Tensor::zeros({n});
        CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
    }
}

TEST_CASE("a tensor larger than the machine's memory is a clear error, and the allocator works on", "[allocator]") {
    { auto t = Tensor::zeros({1000}); }
    REQUIRE(allocator_stats().bytes_cached > 0);
    const AllocatorStats before = allocator_stats();
    // 4 TiB: refused before the system is asked, after the cache was given back.
    CHECK_THROWS_WITH(Tensor::zeros({int64_t{1} << 40}),
                      Catch::Matchers::Contains("allocator: cannot allocate 4096.0 GiB for a tensor of 1099511627776 "
                                                "floats") &&
                          Catch::Matchers::Contains("of this machine's"));
    CHECK(allocator_stats().bytes_cached == 0);
    CHECK(allocator_stats().bytes_in_use == before.bytes_in_use);
    CHECK(allocator_stats().system_allocations == before.system_allocations);
    // Sizes no memory could hold, and shapes whose element count overflows.
    CHECK_THROWS_WITH(Tensor::zeros({int64_t{1} << 62}), Catch::Matchers::Contains("is beyond any memory"));
    CHECK_THROWS_WITH(Tensor::zeros({int64_t{1} << 40, int64_t{1} << 40}),
                      Catch::Matchers::Contains("has more elements than an int64 counts"));
    auto t = Tensor::full({1000}, 2.0f);
    CHECK(t.sum().item() == 2000.0f);
}
