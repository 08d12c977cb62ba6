// Data-parallel training in one process (a group of one): the gradient sums reduce to the scaling,
// the overlapped reducer equals the plain pass, and a batch's shares make up the batch. Several
// ranks are tested by tests/distributed/ under mpirun.
#include "helpers.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/training/batching.h"

using namespace seqgrad;

TEST_CASE("without a launcher the group is one process", "[distributed]") {
    const nn::Distributed& group = nn::Distributed::current();
    CHECK(group.size() == 1);
    CHECK(group.rank() == 0);
    CHECK(group.is_root());
    CHECK(group.any(true));
    CHECK_FALSE(group.any(false));
    CHECK(group.all_equal(42));
    std::vector<double> values{1.5, -2};
    group.all_reduce_sum(std::span<double>(values));
    CHECK(values == std::vector<double>{1.5, -2});
}

TEST_CASE("gradient sums of one rank scale and keep absent gradients absent", "[distributed]") {
    auto a = Tensor::from_vector({1, 2, 3}, {3}, true);
    auto b = Tensor::from_vector({4}, {1}, true);
    auto unused = Tensor::from_vector({5}, {1}, true);
    ((a * a).sum() + b.sum() * 3.0f).backward();
    // Buckets of 2 values: the flags and the gradients cross bucket boundaries.
    nn::all_reduce_gradients({a, b, unused}, nn::Distributed::current(), 0.5f, 2);
    CHECK(a.grad().to_vector() == std::vector<float>{1, 2, 3});
    CHECK(b.grad().to_vector() == std::vector<float>{1.5f});
    CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("the overlapped reducer of one rank is the backward pass, scaled", "[distributed]") {
    Generator gen(3);
    auto w = Tensor::uniform({4, 3}, -1, 1, gen, true);
    auto v = Tensor::uniform({3}, -1, 1, gen, true);
    auto x = Tensor::uniform({5, 4}, -1, 1, gen);
    const auto loss = [&] { return (tanh(matmul(x, w)) * v).sum(); };
    loss().backward();
    const std::vector<float> gw = w.grad().to_vector(), gv = v.grad().to_vector();
    w.zero_grad();
    v.zero_grad();
    nn::GradientReducer reducer({w, v}, nn::Distributed::current(), 5);
    reducer.backward(loss(), 0.25f);
    for (size_t i = 0; i < gw.size(); ++i) CHECK(w.grad().to_vector()[i] == gw[i] * 0.25f);
    for (size_t i = 0; i < gv.size(); ++i) CHECK(v.grad().to_vector()[i] == gv[i] * 0.25f);
    reducer.backward(Tensor(), 1.0f);  // a rank with nothing to compute
}

TEST_CASE("the shares of a batch are its rows, widths and token counts", "[distributed][data]") {
    std::vector<training::EncodedExample> examples;
    for (int64_t i = 0; i < 7; ++i)
        examples.push_back({std::vector<int64_t>(static_cast<size_t>(1 + i % 3), 4),
                            std::vector<int64_t>(static_cast<size_t>(1 + i % 4), 5), i});
    const training::EncodedPairs pairs(examples);
    std::vector<int64_t> rows{0, 1, 2, 3, 4, 5, 6};
    const training::Batch batch = training::make_batch(pairs, rows);
    for (int ranks : {1, 2, 3, 8}) {
        int64_t total_rows = 0, source_tokens = 0, target_tokens = 0;
        for (int r = 0; r < ranks; ++r) {
            const training::Batch share = training::share_of_batch(batch, r, ranks);
            CHECK(share.src.size(1) == batch.src.size(1));
            CHECK(share.tgt.size(1) == batch.tgt.size(1));
            for (int64_t i = 0; i < share.src.size(0); ++i) {
                CHECK(share.example_index[static_cast<size_t>(i)] ==
                      batch.example_index[static_cast<size_t>(total_rows + i)]);
                for (int64_t j = 0; j < share.tgt.size(1); ++j)
                    CHECK(share.tgt.data()[i * share.tgt.size(1) + j] ==
                          batch.tgt.data()[(total_rows + i) * batch.tgt.size(1) + j]);
            }
            total_rows += share.src.size(0);
            source_tokens += share.source_tokens;
            target_tokens += share.target_tokens;
        }
        CHECK(total_rows == 7);
        CHECK(source_tokens == batch.source_tokens);
        CHECK(target_tokens == batch.target_tokens);
    }
    CHECK_THROWS_AS(training::share_of_batch(batch, 2, 2), Error);
}
