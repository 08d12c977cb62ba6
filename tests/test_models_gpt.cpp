// The GPT (models/gpt.h): its shapes, parameters and initialisation, causality, gradients, and
// the end of its context (decoding through the key/value cache against the forward pass is
// test_conformance.cpp's). Its parity with PyTorch is
// test_parity.cpp's (tests/fixtures/gpt_*.safetensors).
#include "test_nn_helpers.h"

#include <cmath>
#include <set>

#include "seqgrad/models/gpt.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"

using namespace seqgrad;
using namespace seqgrad::models;
using Catch::Matchers::Contains;

namespace {

GptKeys& keys_of(ModelConfig& config) { return config.keys<GptKeys>(); }

ModelConfig tiny_gpt(const std::string& positional = "learned", bool bias = true, bool tied = true) {
    ModelConfig c = model_kind("gpt").defaults();
    c.vocab = 11;
    c.dropout = 0;
    GptKeys& g = keys_of(c);
    g.context = 12;
    g.d_model = 16;
    g.n_heads = 2;
    g.n_layers = 2;
    g.d_ff = 32;
    g.positional = positional;
    g.bias = bias;
    g.tie_output = tied;
    return c;
}

// Windows of ids in [4, 11).
IntTensor windows(int64_t rows, int64_t length, uint64_t seed) {
    Generator gen(seed);
    std::vector<int64_t> ids(static_cast<size_t>(rows * length));
    for (auto& id : ids) id = 4 + static_cast<int64_t>(gen.below(7));
    return IntTensor::from_vector(std::move(ids), {rows, length});
}

IntTensor column(const IntTensor& ids, int64_t t) {
    std::vector<int64_t> values;
    for (int64_t r = 0; r < ids.size(0); ++r) values.push_back(ids.data()[r * ids.size(1) + t]);
    return IntTensor::from_vector(std::move(values), {ids.size(0)});
}

}  // namespace

TEST_CASE("the GPT's parameters are named and counted as its kind says", "[gpt]") {
    for (const std::string positional : {"learned", "sinusoidal", "rope"})
        for (bool bias : {true, false})
            for (bool tied : {true, false}) {
                INFO(positional << " bias " << bias << " tied " << tied);
                const ModelConfig config = tiny_gpt(positional, bias, tied);
                Generator gen(1);
                const auto model = make_model(config, gen);
                CHECK(model->num_parameters() == model_kind("gpt").parameters(config));
                std::set<std::string> names;
                for (const auto& [name, tensor] : model->state_dict()) names.insert(name);
                CHECK(names.count("token_embedding.weight"));
                CHECK(names.count("position_embedding.weight") == (positional == "learned" ? 1u : 0u));
                CHECK(names.count("output.weight") == (tied ? 0u : 1u));
                CHECK(names.count("blocks.1.attention.wq.bias") == (bias ? 1u : 0u));
                CHECK(names.count("blocks.0.ffn_norm.beta") == (bias ? 1u : 0u));
                CHECK(names.count("final_norm.gamma"));
                for (const std::string& name : names) CHECK(name.find("output.bias") == std::string::npos);
            }
}

TEST_CASE("the GPT starts from GPT-2's initialisation", "[gpt]") {
    ModelConfig config = tiny_gpt();
    keys_of(config).d_model = 64;
    keys_of(config).d_ff = 256;
    keys_of(config).n_layers = 4;
    Generator gen(2);
    const auto model = make_model(config, gen);
    const auto stddev = [](const Tensor& t) {
        double sum = 0, sq = 0;
        for (float v : t.to_vector()) sum += v, sq += static_cast<double>(v) * v;
        const double n = static_cast<double>(t.numel()), mean = sum / n;
        return std::sqrt(sq / n - mean * mean);
    };
    const float residual = 0.02f / std::sqrt(2.0f * 4.0f);
    for (const auto& [name, p] : model->named_parameters()) {
        INFO(name);
        if (name.ends_with(".attention.wo.weight") || name.ends_with(".feed_forward.w2.weight"))
            CHECK(stddev(p) == Approx(residual).epsilon(0.1));
        else if (p.dim() >= 2) CHECK(stddev(p) == Approx(0.02).epsilon(0.1));
        else if (name.ends_with(".bias") || name.ends_with(".beta")) CHECK(stddev(p) == 0);
        else if (name.ends_with(".gamma"))
            CHECK(p.to_vector() == std::vector<float>(static_cast<size_t>(p.numel()), 1));
    }
}

TEST_CASE("the GPT is causal: a later token never changes an earlier position's logits", "[gpt]") {
    for (const std::string positional : {"learned", "sinusoidal", "rope"}) {
        INFO(positional);
        Generator gen(3);
        auto model = make_model(tiny_gpt(positional), gen);
        model->eval();
        IntTensor ids = windows(2, 9, 4);
        const Tensor before = model->logits(IntTensor::zeros({2, 0}), ids);
        CHECK(before.shape() == Shape{2, 9, 11});
        ids.data()[6] = ids.data()[6] == 4 ? 5 : 4;  // row 0, position 6
        const Tensor after = model->logits(IntTensor::zeros({2, 0}), ids);
        for (int64_t t = 0; t < 9; ++t)
            for (int64_t v = 0; v < 11; ++v) {
                const int64_t at = t * 11 + v;
                if (t < 6) CHECK(after.data()[at] == before.data()[at]);
            }
        CHECK(testing::max_abs_diff(slice(after, 1, 6, 9), slice(before, 1, 6, 9)) > 1e-6f);
        CHECK(testing::max_abs_diff(slice(after, 0, 1, 2), slice(before, 0, 1, 2)) == 0);  // row 1 untouched
    }
}

TEST_CASE("the GPT's loss passes gradcheck through its blocks, norms, positions and output", "[gpt][gradcheck]") {
    struct Case {
        std::string positional;
        bool bias, tied;
    };
    for (const Case& c : {Case{"rope", true, true}, Case{"learned", false, false}}) {
        INFO(c.positional << " bias " << c.bias << " tied " << c.tied);
        ModelConfig config = tiny_gpt(c.positional, c.bias, c.tied);
        keys_of(config).d_model = 8;
        keys_of(config).d_ff = 12;
        keys_of(config).n_layers = 1;
        Generator gen(5);
        auto model = make_model(config, gen);
        model->eval();
        // GPT-2's N(0, 0.02) start leaves attention uniform and most gradients near float32's
        // rounding floor; wider weights (and gammas off 1) give every tensor a gradient to check.
        for (const auto& [name, p] : model->named_parameters()) {
            nn::init_normal(p, gen, 0.4f);
            if (name.ends_with(".gamma")) {
                Tensor gamma = p;
                for (int64_t i = 0; i < gamma.numel(); ++i) gamma.data()[i] += 1.0f;
            }
        }
        const IntTensor batch = windows(2, 6, 6);
        std::vector<std::string> names = {"token_embedding.weight",        "blocks.0.attention.wq.weight",
                                          "blocks.0.attention.wo.weight",  "blocks.0.feed_forward.w1.weight",
                                          "blocks.0.attention_norm.gamma", "final_norm.gamma"};
        if (c.bias) names.insert(names.end(), {"blocks.0.attention.wk.bias", "blocks.0.ffn_norm.beta"});
        if (c.positional == "learned") names.push_back("position_embedding.weight");
        if (!c.tied) names.push_back("output.weight");
        std::vector<Tensor> tensors;
        for (const std::string& name : names) tensors.push_back(testing::parameter(*model, name));
        testing::require_gradcheck_in_place(
            [&] {
            return model->loss(IntTensor::zeros({2, 0}), batch, 0.0f);
            },
            tensors);
    }
}

TEST_CASE("decoding a GPT past its context is refused", "[gpt][errors]") {
    Generator gen(7);
    auto model = make_model(tiny_gpt("learned"), gen);
    model->eval();
    NoGradGuard no_grad;
    const IntTensor ids = windows(3, 12, 8);
    auto state = model->start_decoding(IntTensor::zeros({3, 0}));
    for (int64_t t = 0; t < 12; ++t) model->decode_step(*state, column(ids, t));
    CHECK_THROWS_WITH(model->decode_step(*state, column(ids, 0)), Contains("beyond the context"));
}

TEST_CASE("the GPT refuses a source, ids out of range and windows past its context", "[gpt][errors]") {
    Generator gen(9);
    auto model = make_model(tiny_gpt(), gen);
    CHECK_THROWS_WITH(model->logits(windows(2, 3, 1), windows(2, 4, 2)), Contains("reads no source"));
    CHECK_THROWS_WITH(model->logits(IntTensor::zeros({1, 0}), IntTensor::full({1, 3}, 11)), Contains("id 11"));
    CHECK_THROWS_WITH(model->logits(IntTensor::zeros({1, 0}), windows(1, 13, 3)), Contains("exceeds the context"));
    CHECK_THROWS_WITH(model->start_decoding(windows(1, 2, 3)), Contains("reads no source"));
    ModelConfig odd = tiny_gpt("rope");
    keys_of(odd).d_model = 18;
    keys_of(odd).n_heads = 2;  // head size 9: rotary positions need an even one
    CHECK_THROWS_WITH(make_model(odd, gen), Contains("must be even"));
    keys_of(odd).n_heads = 4;
    CHECK_THROWS_WITH(make_model(odd, gen), Contains("not divisible"));
}

TEST_CASE("a GPT config reads GPT-2's defaults for the keys it leaves out", "[gpt]") {
    const ModelConfig c = ModelConfig::from_json(R"({"model": "gpt", "vocab": 65})");
    const GptKeys& g = c.keys<GptKeys>();
    CHECK(g.positional == "learned");
    CHECK(g.activation == "gelu");
    CHECK(g.tie_output);
    CHECK(g.bias);
    CHECK(g.context == 1024);
    CHECK(g.d_model == 768);
    CHECK_THROWS_WITH(ModelConfig::from_json(R"({"model": "gpt", "d_model": 64})"), Contains("missing \"vocab\""));
    CHECK(ModelConfig::from_json(c.to_json()).to_json() == c.to_json());
    CHECK(!reads_source(c));
    CHECK(vocabulary_sizes(c) == std::pair<int64_t, int64_t>{0, 65});
}
