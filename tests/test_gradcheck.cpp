// gradcheck itself: it passes correct gradients and catches wrong ones.
#include "helpers.h"

using namespace seqgrad;

namespace {

// x^2 with a backward that forgets the factor 2: a deliberately wrong operation.
Tensor wrong_square(const Tensor& x) {
    Tensor out = Tensor::from_vector(x.to_vector(), x.shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] *= out.data()[i];
    return record("wrong_square", out, {x}, [x](const Tensor& g) { return std::vector<Tensor>{mul(g, x)}; });
}

// x^2 with the right backward, written the same way.
Tensor right_square(const Tensor& x) {
    Tensor out = Tensor::from_vector(x.to_vector(), x.shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] *= out.data()[i];
    return record("right_square", out, {x}, [x](const Tensor& g) { return std::vector<Tensor>{mul(g, x) * 2.0f}; });
}

}  // namespace

TEST_CASE("gradcheck passes a correct backward", "[gradcheck]") {
    auto x = testing::random_tensor({3, 4}, 1);
    auto result = gradcheck([](const std::vector<Tensor>& in) { return right_square(in[0]); }, {x});
    INFO(result.message);
    CHECK(result.ok);
    CHECK(result.max_abs_error < 1e-3);
}

TEST_CASE("gradcheck catches a backward that is off by a factor", "[gradcheck]") {
    auto x = testing::random_tensor({3, 4}, 1);
    auto result = gradcheck([](const std::vector<Tensor>& in) { return wrong_square(in[0]); }, {x});
    CHECK_FALSE(result.ok);
    CHECK_THAT(result.message, Catch::Contains("input 0"));
}

TEST_CASE("gradcheck catches a gradient sent to the wrong input", "[gradcheck]") {
    auto a = testing::random_tensor({2, 3}, 2);
    auto b = testing::random_tensor({2, 3}, 3);
    auto swapped = [](const std::vector<Tensor>& in) {
        const Tensor& x = in[0];
        const Tensor& y = in[1];
        Tensor out = Tensor::from_vector((x.detach() * y.detach()).to_vector(), x.shape());
        return record("swapped_mul", out, {x, y}, [x, y](const Tensor& g) {
            return std::vector<Tensor>{mul(g, x), mul(g, y)};
        });
    };
    CHECK_FALSE(gradcheck(swapped, {a, b}).ok);
}

TEST_CASE("gradcheck leaves the caller's tensors untouched", "[gradcheck]") {
    auto x = testing::random_tensor({5}, 4);
    const auto before = x.to_vector();
    testing::require_gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]); }, {x});
    CHECK(x.to_vector() == before);
    CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradcheck_in_place checks tensors that the function reads itself, and restores them", "[gradcheck]") {
    auto x = testing::random_tensor({3, 4}, 5);
    const auto before = x.to_vector();
    const GradcheckResult right = gradcheck_in_place([&] { return right_square(x); }, {x});
    INFO(right.message);
    CHECK(right.ok);
    CHECK(x.to_vector() == before);
    REQUIRE(x.grad().defined());  // what the check's backward accumulated, from zero

    const GradcheckResult wrong = gradcheck_in_place([&] { return wrong_square(x); }, {x});
    CHECK_FALSE(wrong.ok);
    CHECK_THAT(wrong.message, Catch::Contains("input 0"));
    CHECK(x.to_vector() == before);

    const Tensor constant = Tensor::ones({2});
    CHECK_THROWS_WITH(gradcheck_in_place([&] { return right_square(x); }, {constant}), Catch::Contains("require grad"));
}
