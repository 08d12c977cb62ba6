// The attention Seq2Seq (dot and additive scorers): parity with PyTorch on every committed
// attn_seq2seq fixture and ten Adam steps, the attention weights (step by step against forward),
// padding invariance, the parameter names of docs/parity.md, gradcheck through the whole model,
// and clear errors for bad batches.
#include "test_nn_helpers.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::models;
using Catch::Matchers::Contains;

namespace {

ModelConfig small_config(const std::string& attention, int64_t layers = 1, int64_t hidden = 5) {
    ModelConfig c = model_kind("attn_seq2seq").defaults();
    c.src_vocab = 8;
    c.tgt_vocab = 9;
    AttnSeq2SeqKeys& keys = c.keys<AttnSeq2SeqKeys>();
    keys.hidden_size = hidden;
    keys.num_layers = layers;
    keys.attention = attention;
    return c;
}

const IntTensor& kSrc = testing::kRaggedSrc;
const IntTensor& kTgt = testing::kRaggedTgt;
const IntTensor kTgtIn = kTgt.slice_last(0, 5);

using testing::parameter;

}  // namespace

// ---- decoding, attention weights and padding ----

TEST_CASE("AttnSeq2Seq's attention weights step by step are forward's", "[attn_seq2seq]") {
    for (const std::string attention : {"dot", "additive"}) {
        INFO(attention);
        Generator gen(3);
        AttnSeq2Seq model(small_config(attention, 2), gen);
        const AttnDecoderOutput full = model.forward_with_attention(kSrc, kTgtIn);
        REQUIRE(full.logits.shape() == Shape{3, 5, 9});
        REQUIRE(full.attention_weights.shape() == Shape{3, 5, 5});
        CHECK(testing::max_abs_diff(full.logits, model.forward(kSrc, kTgtIn)) == 0.0f);

        AttnSeq2SeqState state = model.encode(kSrc);
        for (int64_t t = 0; t < kTgtIn.size(1); ++t) {
            std::vector<int64_t> column;
            for (int64_t b = 0; b < 3; ++b) column.push_back(kTgtIn.data()[b * kTgtIn.size(1) + t]);
            const AttnSeq2SeqStep step = model.step(IntTensor::from_vector(column, {3}), state);
            REQUIRE(step.logits.shape() == Shape{3, 9});
            REQUIRE(step.attention_weights.shape() == Shape{3, 5});
            CHECK(testing::max_abs_diff(step.attention_weights,
                                        reshape(slice(full.attention_weights, 1, t, t + 1), {3, 5})) <= 1e-6f);
            state = step.state;
        }
    }
}

TEST_CASE("AttnSeq2Seq attention weights sum to one over the real source tokens and are zero at <pad>",
          "[attn_seq2seq]") {
    for (const std::string attention : {"dot", "additive"}) {
        INFO(attention);
        Generator gen(6);
        AttnSeq2Seq model(small_config(attention), gen);
        const Tensor weights = model.forward_with_attention(kSrc, kTgtIn).attention_weights;  // [3, 5, 5]
        for (int64_t b = 0; b < 3; ++b)
            for (int64_t t = 0; t < 5; ++t) {
                double total = 0;
                for (int64_t s = 0; s < 5; ++s) {
                    const float w = weights.data()[(b * 5 + t) * 5 + s];
                    if (kSrc.data()[b * 5 + s] == kPad) CHECK(w == 0.0f);
                    total += w;
                }
                CHECK(total == Approx(1.0).margin(1e-6));
            }
    }
}

TEST_CASE("AttnSeq2Seq padding never changes a row's logits at its real positions", "[attn_seq2seq]") {
    for (const std::string attention : {"dot", "additive"}) {
        INFO(attention);
        Generator gen(5);
        AttnSeq2Seq model(small_config(attention, 2), gen);
        const Tensor batched = model.forward(kSrc, kTgtIn);  // [3, 5, 9]
        for (int64_t b = 0; b < 3; ++b) {
            INFO("row " << b);
            const IntTensor tgt_row = testing::unpadded_row(kTgtIn, b);
            const Tensor alone = model.forward(testing::unpadded_row(kSrc, b), tgt_row);  // [1, len, 9]
            const Tensor padded = slice(slice(batched, 0, b, b + 1), 1, 0, tgt_row.size(1));
            CHECK(testing::max_abs_diff(alone, padded) <= 1e-5f);
        }
    }
}

// ---- names ----

TEST_CASE("AttnSeq2Seq state_dict names and shapes are PyTorch's, for 1 and 2 layers and both scorers",
          "[attn_seq2seq]") {
    for (const std::string attention : {"dot", "additive"}) {
        for (int64_t layers : {1, 2}) {
            INFO(attention << ", " << layers << " layers");
            // h = 5, src_vocab = 8, tgt_vocab = 9
            std::vector<std::pair<std::string, Shape>> want = {{"encoder.embedding.weight", {8, 5}}};
            for (int64_t k = 0; k < layers; ++k)
                for (const std::string suffix : {"", "_reverse"}) {
                    const std::string l = std::to_string(k) + suffix;
                    want.emplace_back("encoder.rnn.weight_ih_l" + l, Shape{20, k == 0 ? 5 : 10});
                    want.emplace_back("encoder.rnn.weight_hh_l" + l, Shape{20, 5});
                    want.emplace_back("encoder.rnn.bias_ih_l" + l, Shape{20});
                    want.emplace_back("encoder.rnn.bias_hh_l" + l, Shape{20});
                }
            want.emplace_back("encoder.fc.weight", Shape{5, 10});
            want.emplace_back("encoder.fc.bias", Shape{5});
            if (attention == "additive") {
                want.emplace_back("decoder.attention.v", Shape{5});
                want.emplace_back("decoder.attention.attn.weight", Shape{5, 10});
                want.emplace_back("decoder.attention.attn.bias", Shape{5});
            }
            want.emplace_back("decoder.embedding.weight", Shape{9, 5});
            for (int64_t k = 0; k < layers; ++k) {
                const std::string l = std::to_string(k);
                want.emplace_back("decoder.rnn.weight_ih_l" + l, Shape{20, k == 0 ? 10 : 5});
                want.emplace_back("decoder.rnn.weight_hh_l" + l, Shape{20, 5});
                want.emplace_back("decoder.rnn.bias_ih_l" + l, Shape{20});
                want.emplace_back("decoder.rnn.bias_hh_l" + l, Shape{20});
            }
            want.emplace_back("decoder.fc.weight", Shape{9, 5});
            want.emplace_back("decoder.fc.bias", Shape{9});

            Generator gen(1);
            AttnSeq2Seq model(small_config(attention, layers), gen);
            std::vector<std::pair<std::string, Shape>> got;
            for (const auto& [name, t] : model.state_dict()) got.emplace_back(name, t.shape());
            CHECK(got == want);
        }
    }
}

// ---- gradients ----

TEST_CASE("AttnSeq2Seq gradients of the loss agree with finite differences", "[attn_seq2seq][gradcheck]") {
    // hidden 3, vocab 6: small enough to perturb every element.
    const IntTensor src = IntTensor::from_vector({4, 5, 0, 5, 4, 4}, {2, 3});
    const IntTensor tgt = IntTensor::from_vector({1, 4, 2, 0, 1, 5, 4, 2}, {2, 4});
    const IntTensor tgt_in = tgt.slice_last(0, 3), tgt_out = tgt.slice_last(1, 4);
    for (const std::string attention : {"dot", "additive"}) {
        INFO(attention);
        ModelConfig config = small_config(attention, 2, 3);
        config.src_vocab = config.tgt_vocab = 6;
        Generator gen(1);
        AttnSeq2Seq model(config, gen);
        const auto loss = [&] { return sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f); };
        // The encoder's gradients are 2e-4 to 1e-3: the tolerance sits below them, above float32's
        // noise. The additive scorer's own parameters have gradients near 1e-6 at this size, below
        // what finite differences resolve in float32; its layer test checks them (test_nn_attention).
        GradcheckOptions options;
        options.atol = 5e-5;
        testing::require_gradcheck_in_place(loss,
                                            {parameter(model, "encoder.rnn.weight_hh_l0_reverse"),
                                             parameter(model, "encoder.fc.weight"),
                                             parameter(model, "decoder.rnn.weight_ih_l0")},
                                            options);
    }
}

// ---- errors ----

TEST_CASE("AttnSeq2Seq refuses bad batches with a clear error", "[attn_seq2seq][errors]") {
    Generator gen(2);
    AttnSeq2Seq model(small_config("dot"), gen);
    SECTION("a source id beyond the vocabulary") {
        const IntTensor src = IntTensor::from_vector({4, 8, 0}, {1, 3});
        CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 4}, {1, 2})),
                          Contains("src id 8 at [0, 1]") && Contains("[0, 8)"));
    }
    SECTION("a target id beyond the vocabulary") {
        const IntTensor tgt_in = IntTensor::from_vector({1, 4, 9, 1, 4, 4, 1, 5, 5}, {3, 3});
        CHECK_THROWS_WITH(model.forward(kSrc, tgt_in), Contains("tgt_in id 9 at [0, 2]"));
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
    SECTION("a step whose tokens do not fit the state") {
        const AttnSeq2SeqState state = model.encode(kSrc);
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1, 1}, {2}), state), Contains("prev_tokens must be [3]"));
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1, 1, 9}, {3}), state), Contains("prev_tokens id 9"));
    }
    SECTION("a config for another model") {
        ModelConfig config = small_config("dot");
        config.model = "seq2seq";
        Generator g(0);
        CHECK_THROWS_WITH(AttnSeq2Seq(config, g), Contains("config.model is \"seq2seq\""));
    }
    SECTION("a step from an empty state") {
        CHECK_THROWS_WITH(model.step(IntTensor::from_vector({1}, {1}), AttnSeq2SeqState()),
                          Contains("the state is empty"));
    }
    SECTION("an unknown scorer") {
        Generator g(0);
        CHECK_THROWS_WITH(AttnSeq2Seq(small_config("general"), g), Contains("dot or additive"));
    }
}

TEST_CASE("AttnSeq2Seq's teacher forcing below 1 is step() fed the true or its own token, gradients too",
          "[attn_seq2seq]") {
    // Five steps of three rows: the decoder's weights laid out for them where the panels run.
    Generator gen(5);
    AttnSeq2Seq model(small_config("dot", 2), gen);
    testing::check_teacher_forcing(model, kSrc, kTgtIn, 0.5f, 1);
}

TEST_CASE("AttnSeq2Seq's decode_step is step(), its LSTM's weights laid out once for the steps",
          "[attn_seq2seq][decoding]") {
    Generator gen(6);
    AttnSeq2Seq model(small_config("dot", 2), gen);
    testing::check_decode_steps(model, kSrc, 6);
}
