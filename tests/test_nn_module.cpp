// Module: dotted names and their order, buffers, state_dict loading and its errors, modes.
#include "helpers.h"

#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::nn;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> names_of(const NamedTensors& named) {
    std::vector<std::string> names;
    for (const auto& [name, t] : named) names.push_back(name);
    return names;
}

struct Block : Module {
    explicit Block(Generator& gen) {
        fc = register_module("fc", std::make_shared<Linear>(3, 3, gen));
        norm = register_module("norm", std::make_shared<LayerNorm>(3));
        dropout = register_module("dropout", std::make_shared<Dropout>(0.5f));
    }
    std::shared_ptr<Linear> fc;
    std::shared_ptr<LayerNorm> norm;
    std::shared_ptr<Dropout> dropout;
};

// A submodule registered before the module's own parameter and buffers, a list of blocks, and
// one persistent buffer.
struct Outer : Module {
    explicit Outer(Generator& gen) {
        proj = register_module("proj", std::make_shared<Linear>(4, 3, gen, /*bias=*/false));
        scale = register_parameter("scale", Tensor::ones({3}));
        table = register_buffer("table", Tensor::zeros({5, 3}));
        counts = register_buffer("counts", Tensor::zeros({2}), /*persistent=*/true);
        blocks = register_module("blocks", std::make_shared<ModuleList<Block>>());
        blocks->push_back(std::make_shared<Block>(gen));
        blocks->push_back(std::make_shared<Block>(gen));
    }
    std::shared_ptr<Linear> proj;
    Tensor scale, table, counts;
    std::shared_ptr<ModuleList<Block>> blocks;
};

std::map<std::string, Tensor> as_map(const NamedTensors& named) { return {named.begin(), named.end()}; }

}  // namespace

TEST_CASE("named_parameters gives dotted names in PyTorch's order: own parameters, then submodules", "[nn][module]") {
    Generator gen(1);
    Outer outer(gen);
    const std::vector<std::string> expected{"scale",
                                            "proj.weight",
                                            "blocks.0.fc.weight",
                                            "blocks.0.fc.bias",
                                            "blocks.0.norm.gamma",
                                            "blocks.0.norm.beta",
                                            "blocks.1.fc.weight",
                                            "blocks.1.fc.bias",
                                            "blocks.1.norm.gamma",
                                            "blocks.1.norm.beta"};
    CHECK(names_of(outer.named_parameters()) == expected);
    // The registry and the members are the same tensors.
    CHECK(outer.named_parameters()[2].second.data() == outer.blocks->operator[](0)->fc->weight.data());
    for (const Tensor& p : outer.parameters()) CHECK(p.requires_grad());
    CHECK(outer.num_parameters() == 3 + 12 + 2 * (9 + 3 + 3 + 3));
}

TEST_CASE("buffers are not parameters, and only persistent ones are in state_dict", "[nn][module]") {
    Generator gen(1);
    Outer outer(gen);
    CHECK(names_of(outer.named_buffers()) == std::vector<std::string>{"table", "counts"});
    const auto state = names_of(outer.state_dict());
    CHECK(std::find(state.begin(), state.end(), "table") == state.end());
    CHECK(std::find(state.begin(), state.end(), "counts") != state.end());
    CHECK(state.size() == outer.named_parameters().size() + 1);
    CHECK_FALSE(outer.table.requires_grad());
}

TEST_CASE("load_state_dict copies values in place, so existing handles see them", "[nn][module]") {
    Generator gen(1), other_gen(2);
    Outer outer(gen), source(other_gen);
    const Tensor weight_handle = outer.proj->weight;  // as an optimizer would hold it
    const float* storage_before = weight_handle.data();
    outer.load_state_dict(as_map(source.state_dict()));
    CHECK(weight_handle.data() == storage_before);
    CHECK(weight_handle.to_vector() == source.proj->weight.to_vector());
    for (const auto& [name, t] : outer.state_dict()) {
        INFO(name);
        CHECK(t.to_vector() == as_map(source.state_dict()).at(name).to_vector());
    }
    // The copy is independent of the source.
    source.proj->weight.data()[0] += 1;
    CHECK(outer.proj->weight.data()[0] != source.proj->weight.data()[0]);
}

TEST_CASE("load_state_dict reports every missing, unexpected and misshaped name in one error, "
          "and changes nothing",
          "[nn][module]") {
    Generator gen(1), other_gen(2);
    Outer outer(gen), source(other_gen);
    auto state = as_map(source.state_dict());
    state.erase("blocks.1.fc.bias");
    state.erase("counts");
    state["blocks.0.extra"] = Tensor::zeros({1});
    state["unknown"] = Tensor::zeros({2});
    state["proj.weight"] = Tensor::zeros({4, 3});  // transposed
    state["blocks.0.norm.gamma"] = Tensor::zeros({2});
    const auto before = outer.proj->weight.to_vector();
    const auto scale_before = outer.scale.to_vector();
    try {
        outer.load_state_dict(state);
        FAIL("no error");
    } catch (const Error& e) {
        const std::string message = e.what();
        INFO(message);
        CHECK_THAT(message, Contains("2 missing, 2 unexpected, 2 with the wrong shape"));
        CHECK_THAT(message, Contains("missing: blocks.1.fc.bias [3]"));
        CHECK_THAT(message, Contains("missing: counts [2]"));
        CHECK_THAT(message, Contains("unexpected: blocks.0.extra"));
        CHECK_THAT(message, Contains("unexpected: unknown"));
        CHECK_THAT(message, Contains("wrong shape: proj.weight expects [3, 4], got [4, 3]"));
        CHECK_THAT(message, Contains("wrong shape: blocks.0.norm.gamma expects [3], got [2]"));
    }
    CHECK(outer.proj->weight.to_vector() == before);
    CHECK(outer.scale.to_vector() == scale_before);
}

TEST_CASE("registration refuses duplicate or dotted names and non-leaf parameters", "[nn][module]") {
    Module m;
    m.register_parameter("w", Tensor::zeros({2}));
    CHECK_THROWS_WITH(m.register_parameter("w", Tensor::zeros({2})), Contains("already registered"));
    CHECK_THROWS_WITH(m.register_buffer("w", Tensor::zeros({2})), Contains("already registered"));
    CHECK_THROWS_WITH(m.register_module("w", std::make_shared<Module>()), Contains("already registered"));
    CHECK_THROWS_WITH(m.register_parameter("a.b", Tensor::zeros({2})), Contains("contain no '.'"));
    CHECK_THROWS_WITH(m.register_parameter("", Tensor::zeros({2})), Contains("non-empty"));
    const Tensor x = Tensor::ones({2}, true);
    CHECK_THROWS_WITH(m.register_parameter("y", x * 2.0f), Contains("result of an operation"));
}

TEST_CASE("train and eval reach every submodule, and dropout follows the mode", "[nn][module]") {
    Generator gen(1);
    Outer outer(gen);
    CHECK(outer.blocks->operator[](1)->dropout->is_training());
    outer.eval();
    for (const auto& block : *outer.blocks) {
        CHECK_FALSE(block->is_training());
        CHECK_FALSE(block->dropout->is_training());
    }
    const Tensor x = testing::random_tensor({4, 2}, 3, 1, 2, false);
    CHECK(outer.blocks->operator[](0)->dropout->forward(x).to_vector() == x.to_vector());
    outer.train();
    CHECK(outer.blocks->operator[](0)->dropout->is_training());
    CHECK(outer.blocks->operator[](0)->dropout->forward(x).to_vector() != x.to_vector());
}

TEST_CASE("zero_grad drops every parameter's gradient", "[nn][module]") {
    Generator gen(1);
    Outer outer(gen);
    const Tensor x = testing::random_tensor({2, 4}, 5, -1, 1, false);
    Tensor y = outer.proj->forward(x) * outer.scale;
    for (const auto& block : *outer.blocks) y = block->norm->forward(block->fc->forward(y));
    y.sum().backward();
    CHECK(outer.proj->weight.grad().defined());
    CHECK(outer.blocks->operator[](1)->norm->gamma.grad().defined());
    outer.zero_grad();
    for (const Tensor& p : outer.parameters()) CHECK_FALSE(p.grad().defined());
}
