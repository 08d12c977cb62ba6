// The LSTM Seq2Seq (both decoders): parity with PyTorch on every committed seq2seq fixture,
// padding invariance (step-by-step decoding is test_conformance.cpp's), the parameter names of docs/parity.md,
// gradcheck through the whole model, and clear errors for bad batches.
#include "test_nn_helpers.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "seqgrad/models/seq2seq.h"
#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::models;
using Catch::Matchers::Contains;

namespace {

ModelConfig small_config(const std::string& decoder, int64_t layers = 1, int64_t hidden = 5) {
    ModelConfig c = model_kind("seq2seq").defaults();
    c.src_vocab = 8;
    c.tgt_vocab = 9;
    Seq2SeqKeys& keys = c.keys<Seq2SeqKeys>();
    keys.hidden_size = hidden;
    keys.num_layers = layers;
    keys.decoder = decoder;
    return c;
}

const IntTensor& kSrc = testing::kRaggedSrc;
const IntTensor& kTgt = testing::kRaggedTgt;
const IntTensor kTgtIn = kTgt.slice_last(0, 5);

using testing::parameter;

}  // namespace

// ---- decoding and padding ----

TEST_CASE("Seq2Seq padding never changes a row's logits at its real positions", "[seq2seq]") {
    for (const std::string decoder : {"init_state", "context_input"}) {
        INFO(decoder);
        Generator gen(5);
        Seq2Seq model(small_config(decoder, 2), gen);
        const Tensor batched = model.forward(kSrc, kTgtIn);  // [3, 5, 9]
        for (int64_t b = 0; b < 3; ++b) {
            INFO("row " << b);
            const IntTensor tgt_row = testing::unpadded_row(kTgtIn, b);
            const Tensor alone = model.forward(testing::unpadded_row(kSrc, b), tgt_row);  // [1, len, 9]
            const int64_t len = tgt_row.size(1);
            const Tensor padded = slice(slice(batched, 0, b, b + 1), 1, 0, len);
            CHECK(testing::max_abs_diff(alone, padded) <= 1e-5f);
        }
    }
}

// ---- names ----

TEST_CASE("Seq2Seq state_dict names and shapes are PyTorch's, for 1 and 2 layers and both decoders", "[seq2seq]") {
    for (const std::string decoder : {"init_state", "context_input"}) {
        for (int64_t layers : {1, 2}) {
            INFO(decoder << ", " << layers << " layers");
            // h = 5, src_vocab = 8, tgt_vocab = 9
            std::vector<std::pair<std::string, Shape>> want = {{"encoder.embedding.weight", {8, 5}}};
            auto lstm = [&](const std::string& prefix, int64_t first_input) {
                for (int64_t k = 0; k < layers; ++k) {
                    const std::string l = std::to_string(k);
                    want.emplace_back(prefix + ".weight_ih_l" + l, Shape{20, k == 0 ? first_input : 5});
                    want.emplace_back(prefix + ".weight_hh_l" + l, Shape{20, 5});
                    want.emplace_back(prefix + ".bias_ih_l" + l, Shape{20});
                    want.emplace_back(prefix + ".bias_hh_l" + l, Shape{20});
                }
            };
            lstm("encoder.rnn", 5);
            want.emplace_back("decoder.embedding.weight", Shape{9, 5});
            lstm("decoder.rnn", decoder == "context_input" ? 10 : 5);
            want.emplace_back("decoder.fc.weight", Shape{9, 5});
            want.emplace_back("decoder.fc.bias", Shape{9});

            Generator gen(1);
            Seq2Seq model(small_config(decoder, layers), gen);
            std::vector<std::pair<std::string, Shape>> got;
            for (const auto& [name, t] : model.state_dict()) got.emplace_back(name, t.shape());
            CHECK(got == want);
        }
    }
}

// ---- gradients ----

TEST_CASE("Seq2Seq gradients of the loss agree with finite differences", "[seq2seq][gradcheck]") {
    // hidden 3, vocab 6: small enough to perturb every element.
    const IntTensor src = IntTensor::from_vector({4, 5, 0, 5, 4, 4}, {2, 3});
    const IntTensor tgt = IntTensor::from_vector({1, 4, 2, 0, 1, 5, 4, 2}, {2, 4});
    const IntTensor tgt_in = tgt.slice_last(0, 3), tgt_out = tgt.slice_last(1, 4);
    // The encoder's gradients are small here (1e-4 to 1e-3: with context_input only its last final
    // state reaches the decoder), so the tolerance sits below them, above float32's noise (about 2e-5),
    // and the seeds give each checked tensor gradients a zero backward could not pass for.
    GradcheckOptions options;
    options.atol = 5e-5;
    for (const auto& [decoder, seed] : {std::pair{"init_state", 7}, std::pair{"context_input", 5}}) {
        INFO(decoder);
        ModelConfig config = small_config(decoder, 2, 3);
        config.src_vocab = config.tgt_vocab = 6;
        Generator gen(static_cast<uint64_t>(seed));
        Seq2Seq model(config, gen);
        const auto loss = [&] { return sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f); };
        testing::require_gradcheck_in_place(
            loss,
            {parameter(model, "encoder.rnn.weight_hh_l0"), parameter(model, "encoder.embedding.weight"),
             parameter(model, "decoder.rnn.weight_ih_l0"), parameter(model, "decoder.fc.bias")},
            options);
    }
}

// ---- errors ----

TEST_CASE("Seq2Seq refuses bad batches with a clear error", "[seq2seq][errors]") {
    Generator gen(2);
    Seq2Seq model(small_config("init_state"), gen);
    SECTION("a source id beyond the vocabulary") {
        const IntTensor src = IntTensor::from_vector({4, 8, 0}, {1, 3});
        CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 4}, {1, 2})),
                          Contains("src id 8 at [0, 1]") && Contains("[0, 8)"));
    }
    SECTION("a target id beyond the vocabulary") {
        const IntTensor tgt_in = IntTensor::from_vector({1, 4, 9, 1, 4, 4, 1, 5, 5}, {3, 3});
        CHECK_THROWS_WITH(model.forward(kSrc, tgt_in), Contains("tgt_in id 9 at [0, 2]"));
    }
    SECTION("a negative id") {
        const IntTensor tgt_in = IntTensor::from_vector({1, -1, 1, 4, 1, 5}, {3, 2});
        CHECK_THROWS_WITH(model.forward(kSrc, tgt_in), Contains("tgt_in id -1"));
    }
    SECTION("source and target batches of different sizes") {
        CHECK_THROWS_WITH(model.forward(kSrc, IntTensor::from_vector({1, 4, 1, 4}, {2, 2})),
                          Contains("different batch sizes"));
    }
    SECTION("a source row that is all padding") {
        const IntTensor src = IntTensor::from_vector({4, 5, 0, 0, 0, 0}, {2, 3});
        CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 4, 1, 4}, {2, 2})),
                          Contains("src row 1 has no real token"));
    }
    SECTION("a source row with padding before a real token") {
        const IntTensor src = IntTensor::from_vector({4, 0, 5}, {1, 3});
        CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 4}, {1, 2})),
                          Contains("src row 0") && Contains("right-padded"));
    }
    SECTION("an empty target") {
        CHECK_THROWS_WITH(model.forward(kSrc, IntTensor::zeros({3, 0})), Contains("tgt_in must be"));
    }
    SECTION("a step whose tokens do not fit the state") {
        const Seq2SeqState state = model.encode(kSrc);
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1, 1}, {2}), state), Contains("prev_tokens must be [3]"));
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1, 1, 9}, {3}), state), Contains("prev_tokens id 9"));
    }
    SECTION("a config for another model") {
        ModelConfig config = small_config("init_state");
        config.model = "attn_seq2seq";
        Generator g(0);
        CHECK_THROWS_WITH(Seq2Seq(config, g), Contains("config.model is \"attn_seq2seq\""));
    }
    SECTION("a step from an empty state") {
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1}, {1}), Seq2SeqState()), Contains("the state is empty"));
    }
    SECTION("an unknown decoder") {
        Generator g(0);
        CHECK_THROWS_WITH(Seq2Seq(small_config("attention"), g), Contains("init_state or context_input"));
    }
}

TEST_CASE("Seq2Seq's teacher forcing below 1 is step() fed the true or its own token, gradients too", "[seq2seq]") {
    // Five steps of three rows: the decoder's weights laid out for them where the panels run.
    Generator gen(5);
    Seq2Seq model(small_config("init_state", 2), gen);
    testing::check_teacher_forcing(model, kSrc, kTgtIn, 0.5f, 1);
}

TEST_CASE("Seq2Seq's decode_step is step(), its LSTM's weights laid out once for the steps", "[seq2seq][decoding]") {
    Generator gen(6);
    Seq2Seq model(small_config("init_state", 2), gen);
    testing::check_decode_steps(model, kSrc, 6);
}
