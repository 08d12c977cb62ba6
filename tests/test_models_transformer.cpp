// The Transformer: parity with PyTorch on every committed transformer fixture (logits, loss,
// gradients, ten Adam steps), the parameter names of docs/parity.md, padding invariance, incremental
// decoding with cached keys and values, weight tying, gradcheck through the whole model, and clear
// errors for bad input.
#include "test_nn_helpers.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "seqgrad/models/transformer.h"
#include "seqgrad/nn.h"

using namespace seqgrad;
using namespace seqgrad::models;
using Catch::Matchers::Contains;

namespace {

TransformerKeys& keys_of(ModelConfig& config) { return config.keys<TransformerKeys>(); }

// A small config; the tests adjust what they exercise.
ModelConfig small_config(const std::string& norm, int64_t n_enc = 1, int64_t n_dec = 1) {
    ModelConfig c = model_kind("transformer").defaults();
    c.src_vocab = 7;
    c.tgt_vocab = 9;
    c.dropout = 0.0f;
    TransformerKeys& t = keys_of(c);
    t.d_model = 4;
    t.n_heads = 2;
    t.n_layers = std::max(n_enc, n_dec);
    t.n_enc_layers = n_enc;
    t.n_dec_layers = n_dec;
    t.d_ff = 6;
    t.max_seq_len = 10;
    t.norm = norm;
    t.activation = "gelu";  // smooth, for gradcheck
    return c;
}

std::vector<std::string> names_of(const nn::NamedTensors& tensors) {
    std::vector<std::string> names;
    for (const auto& [name, t] : tensors) names.push_back(name);
    return names;
}

// logits [B, T, V] at row b, positions [0, len) -> [len, V]
std::vector<float> row_logits(const Tensor& logits, int64_t b, int64_t len) {
    const int64_t t = logits.size(1), v = logits.size(2);
    const float* p = logits.data() + b * t * v;
    return {p, p + len * v};
}

// The gradients of the label-smoothed loss on one batch, by parameter name.
std::map<std::string, Tensor> gradients(Transformer& model, const IntTensor& src, const IntTensor& tgt_in,
                                        const IntTensor& tgt_out) {
    model.zero_grad();
    sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f).backward();
    std::map<std::string, Tensor> grads;
    for (const auto& [name, p] : model.named_parameters()) grads[name] = p.grad();
    return grads;
}

const IntTensor kSrc = IntTensor::from_vector({4, 5, 6, 0, 0,  //
                                               6, 4, 4, 5, 5,  //
                                               5, 0, 0, 0, 0},
                                              {3, 5});
const IntTensor kTgt = IntTensor::from_vector({1, 4, 6, 2, 0, 0,  //
                                               1, 5, 2, 0, 0, 0,  //
                                               1, 6, 6, 4, 5, 2},
                                              {3, 6});

}  // namespace

// ---- names ----

TEST_CASE("state_dict names and shapes are PyTorch's, for Post-LN and Pre-LN", "[transformer]") {
    // d = 4, d_ff = 6, src_vocab = 7, tgt_vocab = 9, one encoder and one decoder layer.
    auto attention = [](const std::string& prefix) {
        std::vector<std::pair<std::string, Shape>> out;
        for (const char* w : {"wq", "wk", "wv", "wo"}) {
            out.emplace_back(prefix + "." + w + ".weight", Shape{4, 4});
            out.emplace_back(prefix + "." + w + ".bias", Shape{4});
        }
        return out;
    };
    auto norm = [](const std::string& prefix) {
        return std::vector<std::pair<std::string, Shape>>{{prefix + ".gamma", {4}}, {prefix + ".beta", {4}}};
    };
    auto feed_forward = [](const std::string& prefix) {
        return std::vector<std::pair<std::string, Shape>>{{prefix + ".w1.weight", {6, 4}},
                                                          {prefix + ".w1.bias", {6}},
                                                          {prefix + ".w2.weight", {4, 6}},
                                                          {prefix + ".w2.bias", {4}}};
    };
    std::vector<std::pair<std::string, Shape>> expected = {{"src_embedding.weight", {7, 4}},
                                                           {"tgt_embedding.weight", {9, 4}}};
    auto append = [&](const std::vector<std::pair<std::string, Shape>>& more) {
        expected.insert(expected.end(), more.begin(), more.end());
    };
    append(attention("encoder_layers.0.attention"));
    append(norm("encoder_layers.0.attention_norm"));
    append(feed_forward("encoder_layers.0.feed_forward"));
    append(norm("encoder_layers.0.ffn_norm"));
    append(attention("decoder_layers.0.self_attention"));
    append(norm("decoder_layers.0.self_attn_norm"));
    append(attention("decoder_layers.0.cross_attention"));
    append(norm("decoder_layers.0.cross_attn_norm"));
    append(feed_forward("decoder_layers.0.feed_forward"));
    append(norm("decoder_layers.0.ffn_norm"));

    for (const std::string norm_kind : {"post", "pre"}) {
        INFO(norm_kind);
        std::vector<std::pair<std::string, Shape>> want = expected;
        if (norm_kind == "pre") {
            for (const auto& entry : norm("encoder_norm")) want.push_back(entry);
            for (const auto& entry : norm("decoder_norm")) want.push_back(entry);
        }
        want.emplace_back("output.weight", Shape{9, 4});
        want.emplace_back("output.bias", Shape{9});

        Generator gen(1);
        Transformer model(small_config(norm_kind), gen);
        std::vector<std::pair<std::string, Shape>> got;
        for (const auto& [name, t] : model.state_dict()) got.emplace_back(name, t.shape());
        CHECK(got == want);
        CHECK(names_of(model.named_parameters()) == names_of(model.state_dict()));
        // The positional table is a buffer: present, not a parameter, not saved.
        CHECK(names_of(model.named_buffers()) == std::vector<std::string>{"pos_encoder.pe"});
        CHECK(model.tied_aliases().empty());
    }

    Generator gen(2);
    Transformer deep(small_config("pre", 3, 2), gen);
    std::set<std::string> layers;
    for (const std::string& name : names_of(deep.state_dict()))
        if (name.find("_layers.") != std::string::npos) layers.insert(name.substr(0, name.find('.', 15)));
    CHECK(layers == std::set<std::string>{"decoder_layers.0", "decoder_layers.1", "encoder_layers.0",
                                          "encoder_layers.1", "encoder_layers.2"});
}

TEST_CASE("every matrix starts Xavier-uniform and every vector as PyTorch's default", "[transformer]") {
    ModelConfig config = small_config("pre");
    keys_of(config).d_model = 16;
    keys_of(config).d_ff = 32;
    Generator gen(3);
    Transformer model(config, gen);
    for (const auto& [name, p] : model.named_parameters()) {
        INFO(name);
        const std::vector<float> v = p.to_vector();
        const float largest = std::fabs(*std::max_element(v.begin(), v.end(), [](float a, float b) {
            return std::fabs(a) < std::fabs(b);
        }));
        if (p.dim() == 2) {
            const float bound = std::sqrt(6.0f / static_cast<float>(p.size(0) + p.size(1)));
            CHECK(largest <= bound);
            CHECK(largest > 0.5f * bound);  // drawn across the range, not N(0, 1) or zero
        } else if (name.find("gamma") != std::string::npos) {
            CHECK(v == std::vector<float>(v.size(), 1.0f));
        } else if (name.find("beta") != std::string::npos) {
            CHECK(v == std::vector<float>(v.size(), 0.0f));
        } else {  // Linear biases: uniform within 1 / sqrt(in_features)
            CHECK(largest <= 1.0f / std::sqrt(static_cast<float>(name.find("w2") != std::string::npos ? 32 : 16)));
        }
    }
}

// ---- behaviour ----

TEST_CASE("padding never changes an answer: each padded row gives the logits of the row run alone", "[transformer]") {
    for (const std::string norm : {"post", "pre"}) {
        INFO(norm);
        ModelConfig config = small_config(norm, 2, 2);
        keys_of(config).d_model = 8;
        keys_of(config).activation = "relu";
        Generator gen(4);
        Transformer model(config, gen);
        model.eval();
        const IntTensor tgt_in = kTgt.slice_last(0, kTgt.size(1) - 1);  // [3, 5], padded rows
        const Tensor logits = model.forward(kSrc, tgt_in);              // [3, 5, 9]
        for (int64_t b = 0; b < kSrc.size(0); ++b) {
            INFO("row " << b);
            const IntTensor src_alone = testing::unpadded_row(kSrc, b);
            const IntTensor tgt_alone = testing::unpadded_row(tgt_in, b);
            const Tensor alone = model.forward(src_alone, tgt_alone);  // [1, len, 9]
            const std::vector<float> padded = row_logits(logits, b, tgt_alone.size(1));
            const std::vector<float> single = row_logits(alone, 0, tgt_alone.size(1));
            for (size_t i = 0; i < padded.size(); ++i) CHECK(padded[i] == Approx(single[i]).margin(1e-5).epsilon(0));
        }
    }
}

TEST_CASE("forward is decode(encode(src)), and the decoder is causal", "[transformer]") {
    Generator gen(5);
    Transformer model(small_config("post"), gen);
    const IntTensor tgt_in = kTgt.slice_last(0, kTgt.size(1) - 1);
    const Tensor logits = model.forward(kSrc, tgt_in);
    const EncoderOutput encoded = model.encode(kSrc);
    CHECK(encoded.memory.shape() == Shape{3, 5, 4});
    CHECK(encoded.src_mask.shape() == Shape{3, 1, 1, 5});
    CHECK(encoded.src_mask.to_vector() == std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0});
    const Tensor decoded = model.decode(tgt_in, encoded.memory, encoded.src_mask);
    CHECK(logits.shape() == Shape{3, 5, 9});
    CHECK(testing::max_abs_diff(logits, decoded) == 0.0f);

    // Changing the last target token changes no earlier position's logits.
    std::vector<int64_t> changed = tgt_in.to_vector();
    changed[2 * 5 + 4] = 7;
    const Tensor after = model.forward(kSrc, IntTensor::from_vector(changed, tgt_in.shape()));
    CHECK(row_logits(after, 2, 4) == row_logits(logits, 2, 4));
    CHECK(row_logits(after, 2, 5) != row_logits(logits, 2, 5));
}

TEST_CASE("dropout is active in training and off in evaluation", "[transformer]") {
    ModelConfig config = small_config("post");
    config.dropout = 0.3f;
    Generator gen(6);
    Transformer model(config, gen);
    const IntTensor tgt_in = kTgt.slice_last(0, kTgt.size(1) - 1);
    const Tensor first = model.forward(kSrc, tgt_in), second = model.forward(kSrc, tgt_in);
    CHECK(testing::max_abs_diff(first, second) > 1e-3f);
    model.eval();
    CHECK(testing::max_abs_diff(model.forward(kSrc, tgt_in), model.forward(kSrc, tgt_in)) == 0.0f);
}

// ---- incremental decoding ----

namespace {

// Column t of ids [B, T]: [B]
IntTensor column(const IntTensor& ids, int64_t t) {
    std::vector<int64_t> values;
    for (int64_t b = 0; b < ids.size(0); ++b) values.push_back(ids.data()[b * ids.size(1) + t]);
    return IntTensor::from_vector(values, {ids.size(0)});
}

// Rows of ids [B, len], in the order given: [rows.size(), len]
IntTensor rows_of(const IntTensor& ids, const std::vector<int64_t>& rows) {
    std::vector<int64_t> values;
    for (int64_t r : rows)
        for (int64_t j = 0; j < ids.size(1); ++j) values.push_back(ids.data()[r * ids.size(1) + j]);
    return IntTensor::from_vector(values, {static_cast<int64_t>(rows.size()), ids.size(1)});
}

// logits [B, T, V] at position t: [B, V]
Tensor at_position(const Tensor& logits, int64_t t) {
    return reshape(slice(logits, 1, t, t + 1), {logits.size(0), logits.size(2)});
}

}  // namespace

TEST_CASE("decoding step by step with cached keys and values gives decode()'s logits at every position",
          "[transformer][decoding]") {
    NoGradGuard no_grad;
    for (const std::string norm : {"post", "pre"}) {
        INFO(norm);
        ModelConfig config = small_config(norm, 2, 2);
        keys_of(config).d_model = 8;
        Generator gen(11);
        Transformer model(config, gen);
        model.eval();
        const IntTensor tgt_in = kTgt.slice_last(0, kTgt.size(1) - 1);  // rows padded after </s>
        const EncoderOutput encoded = model.encode(kSrc);
        const Tensor full = model.decode(tgt_in, encoded.memory, encoded.src_mask);
        Seq2SeqModel& generic = model;  // the interface greedy and beam search use
        const std::unique_ptr<DecodingState> state = generic.start_decoding(kSrc);
        const auto& own = dynamic_cast<const TransformerDecodingState&>(*state);
        CHECK(generic.last_attention(*state).empty());
        const float* keys_storage = nullptr;
        for (int64_t t = 0; t < tgt_in.size(1); ++t) {
            INFO("step " << t);
            const Tensor logits = generic.decode_step(*state, column(tgt_in, t));
            CHECK(own.length() == t + 1);
            // Room for the whole decode once reserved (max_seq_len 10 here): written in place.
            const Tensor& keys = own.self_attention.stored(1).keys;
            CHECK(keys.shape() == Shape{3, 10, 8});
            if (t == 0) keys_storage = keys.data();
            CHECK(keys.data() == keys_storage);
            for (int64_t i = 0; i < 3; ++i) CHECK(own.self_attention.table().data()[i * 10 + t] == i);
            CHECK(testing::max_abs_diff(logits, at_position(full, t)) < 1e-5f);

            // Cross-attention weights: 2 layers x 2 heads, [3, 5] each, rows summing to one,
            // nothing on padded source positions.
            const std::vector<Tensor> weights = generic.last_attention(*state);
            REQUIRE(weights.size() == 4);
            for (const Tensor& w : weights) {
                REQUIRE(w.shape() == Shape{3, 5});
                for (int64_t b = 0; b < 3; ++b) {
                    float total = 0;
                    for (int64_t j = 0; j < 5; ++j) {
                        const float a = w.data()[b * 5 + j];
                        total += a;
                        if (kSrc.data()[b * 5 + j] == kPad) CHECK(a == 0.0f);
                    }
                    CHECK(total == Approx(1.0f).epsilon(1e-5));
                }
            }
        }
    }
}

TEST_CASE("decoding beyond the caches' first capacity grows them and keeps every position", "[transformer][decoding]") {
    NoGradGuard no_grad;
    ModelConfig config = small_config("post", 1, 2);
    keys_of(config).max_seq_len = 80;
    Generator gen(13);
    Transformer model(config, gen);
    model.eval();
    Generator pick(14);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 3 * 40; ++i) ids.push_back(4 + static_cast<int64_t>(pick.next_u64() % 5));
    const IntTensor tgt_in = IntTensor::from_vector(ids, {3, 40});
    const EncoderOutput encoded = model.encode(kSrc);
    const Tensor full = model.decode(tgt_in, encoded.memory, encoded.src_mask);
    const std::unique_ptr<DecodingState> state = model.start_decoding(kSrc);
    const auto& own = dynamic_cast<const TransformerDecodingState&>(*state);
    for (int64_t t = 0; t < 40; ++t) {
        INFO("step " << t);
        const Tensor logits = model.decode_step(*state, column(tgt_in, t));
        CHECK(own.self_attention.stored(0).keys.size(1) == (t < 32 ? 32 : 64));
        CHECK(testing::max_abs_diff(logits, at_position(full, t)) < 1e-5f);
    }
}

TEST_CASE("dropping rows of a decoding state moves no keys, and the rows left decode as before",
          "[transformer][decoding]") {
    NoGradGuard no_grad;
    Generator gen(15);
    Transformer model(small_config("post", 1, 2), gen);
    model.eval();
    const IntTensor tgt_in = kTgt.slice_last(0, 4);
    const std::unique_ptr<DecodingState> state = model.start_decoding(kSrc);
    model.decode_step(*state, column(tgt_in, 0));
    model.decode_step(*state, column(tgt_in, 1));
    const auto& own = dynamic_cast<const TransformerDecodingState&>(*state);
    const float* keys = own.self_attention.stored(0).keys.data();
    const std::vector<int64_t> rows = {2, 0};  // row 1 is done
    state->select_rows(rows);
    CHECK(own.rows() == 2);
    CHECK(own.self_attention.stored(0).keys.data() == keys);  // the caches stay, 3 rows of them
    CHECK(own.self_attention.stored(0).keys.size(0) == 3);
    model.decode_step(*state, column(rows_of(tgt_in, rows), 2));
    const Tensor stepped = model.decode_step(*state, column(rows_of(tgt_in, rows), 3));
    const Tensor expected = model.forward(rows_of(kSrc, rows), rows_of(tgt_in, rows));
    CHECK(testing::max_abs_diff(stepped, at_position(expected, 3)) < 1e-5f);
}

TEST_CASE("selecting rows of a decoding state (beam search) continues as decoding those rows would",
          "[transformer][decoding]") {
    NoGradGuard no_grad;
    Generator gen(12);
    Transformer model(small_config("pre", 1, 2), gen);
    model.eval();
    const IntTensor tgt_in = kTgt.slice_last(0, 3);  // three steps
    const std::unique_ptr<DecodingState> state = model.start_decoding(kSrc);
    model.decode_step(*state, column(tgt_in, 0));
    model.decode_step(*state, column(tgt_in, 1));
    const std::vector<int64_t> rows = {2, 0, 0, 1};
    state->select_rows(rows);
    const auto& own = dynamic_cast<const TransformerDecodingState&>(*state);
    CHECK(own.tokens.to_vector() == rows_of(tgt_in.slice_last(0, 2), rows).to_vector());
    const Tensor stepped = model.decode_step(*state, column(rows_of(tgt_in, rows), 2));
    const Tensor expected = model.forward(rows_of(kSrc, rows), rows_of(tgt_in, rows));
    CHECK(testing::max_abs_diff(stepped, at_position(expected, 2)) < 1e-5f);

    CHECK_THROWS_WITH(state->select_rows({4}), Contains("index 4 at position 0 is outside [0, 4)"));
    CHECK_THROWS_WITH(model.decode_step(*state, IntTensor::full({3}, 4)), Contains("one token per row"));
    CHECK_THROWS_WITH(model.decode_step(*state, IntTensor::full({4}, 9)), Contains("tokens id 9"));
    for (int64_t t = own.length(); t < 10; ++t) model.decode_step(*state, IntTensor::full({4}, 4));
    CHECK_THROWS_WITH(model.decode_step(*state, IntTensor::full({4}, 4)), Contains("beyond max_seq_len 10"));

    struct OtherState : DecodingState {
        void select_rows(const std::vector<int64_t>&) override {}
    } other;
    CHECK_THROWS_WITH(model.decode_step(other, IntTensor::full({1}, 4)),
                      Contains("not made by this decoder's start_decoding"));
}

// ---- gradients ----

TEST_CASE("the Transformer's loss passes gradcheck through attention, norms and both stacks",
          "[transformer][gradcheck]") {
    ModelConfig config = small_config("post");
    config.src_vocab = config.tgt_vocab = 6;
    const IntTensor src = IntTensor::from_vector({4, 5, 0, 5, 4, 4}, {2, 3});
    const IntTensor tgt = IntTensor::from_vector({1, 4, 2, 0, 1, 5, 5, 2}, {2, 4});
    const IntTensor tgt_in = tgt.slice_last(0, 3), tgt_out = tgt.slice_last(1, 4);
    for (const std::string norm : {"post", "pre"}) {
        INFO(norm);
        keys_of(config).norm = norm;
        Generator gen(7);
        Transformer model(config, gen);
        auto loss = [&] { return sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f); };
        testing::require_gradcheck_in_place(
            loss, {model.output->weight, (*model.decoder_layers)[0]->cross_attention->wq->weight,
                   (*model.encoder_layers)[0]->attention->wv->weight, model.src_embedding->weight,
                   (*model.decoder_layers)[0]->ffn_norm->gamma});
    }
}

// ---- positions ----

TEST_CASE("the positional choice: a sinusoidal buffer, a learned table that starts as it, or none (rope)",
          "[transformer][positional]") {
    ModelConfig config = small_config("pre");
    Generator gen(5);
    Transformer sinusoidal(config, gen);
    REQUIRE(sinusoidal.pos_encoder);
    for (const auto& [name, t] : sinusoidal.state_dict()) CHECK(name != "pos_encoder.pe");  // a buffer, not saved
    keys_of(config).positional = "learned";
    Transformer learned(config, gen);
    const auto params = learned.named_parameters();
    const auto table =
        std::find_if(params.begin(), params.end(), [](const auto& p) { return p.first == "pos_encoder.weight"; });
    REQUIRE(table != params.end());
    CHECK(table->second.shape() == Shape{keys_of(config).max_seq_len, keys_of(config).d_model});
    CHECK(table->second.to_vector() ==
          nn::sinusoidal_table(keys_of(config).max_seq_len, keys_of(config).d_model).to_vector());
    keys_of(config).positional = "rope";
    Transformer rope(config, gen);
    CHECK_FALSE(rope.pos_encoder);
    CHECK((*rope.encoder_layers)[0]->attention->rotary);
    CHECK((*rope.decoder_layers)[0]->self_attention->rotary);
    CHECK_FALSE((*rope.decoder_layers)[0]->cross_attention->rotary);
    CHECK(names_of(rope.named_parameters()) == names_of(sinusoidal.named_parameters()));
}

TEST_CASE("positions change the answer: the same weights give other logits under each choice",
          "[transformer][positional]") {
    NoGradGuard no_grad;
    const IntTensor tgt_in = kTgt.slice_last(0, kTgt.size(1) - 1);
    std::vector<std::vector<float>> logits;
    for (const std::string positional : {"sinusoidal", "rope"}) {
        ModelConfig config = small_config("post");
        keys_of(config).positional = positional;
        Generator gen(9);  // the same draws: rope differs from sinusoidal only in where positions enter
        Transformer model(config, gen);
        model.eval();
        logits.push_back(model.forward(kSrc, tgt_in).to_vector());
    }
    float largest = 0;
    for (size_t i = 0; i < logits[0].size(); ++i) largest = std::max(largest, std::fabs(logits[0][i] - logits[1][i]));
    CHECK(largest > 1e-3f);
}

TEST_CASE("the loss passes gradcheck through a learned table and rotary self-attention",
          "[transformer][positional][gradcheck]") {
    ModelConfig config = small_config("pre");
    config.src_vocab = config.tgt_vocab = 6;
    const IntTensor src = IntTensor::from_vector({4, 5, 0, 5, 4, 4}, {2, 3});
    const IntTensor tgt = IntTensor::from_vector({1, 4, 2, 0, 1, 5, 5, 2}, {2, 4});
    const IntTensor tgt_in = tgt.slice_last(0, 3), tgt_out = tgt.slice_last(1, 4);
    {
        keys_of(config).positional = "learned";
        Generator gen(7);
        Transformer model(config, gen);
        auto loss = [&] { return sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f); };
        testing::require_gradcheck_in_place(loss, {model.pos_encoder->table, model.src_embedding->weight});
    }
    {
        keys_of(config).positional = "rope";
        Generator gen(7);
        Transformer model(config, gen);
        auto loss = [&] { return sequence_loss(model.forward(src, tgt_in), tgt_out, 0.1f); };
        testing::require_gradcheck_in_place(loss, {(*model.encoder_layers)[0]->attention->wq->weight,
                                                   (*model.decoder_layers)[0]->self_attention->wk->weight});
    }
}

TEST_CASE("a config's positional choice is checked", "[transformer][positional][errors]") {
    ModelConfig config = small_config("pre");
    keys_of(config).positional = "alibi";
    Generator gen(1);
    CHECK_THROWS_WITH(Transformer(config, gen), Contains("positional") && Contains("alibi"));
    keys_of(config).positional = "rope";
    keys_of(config).d_model = 6;
    keys_of(config).n_heads = 2;  // heads of 3 features: rotation pairs features
    CHECK_THROWS_WITH(Transformer(config, gen), Contains("d_model / n_heads must be even"));
}

// ---- weight tying ----

TEST_CASE("a tied weight is one parameter, listed once, whose gradient sums its uses", "[transformer][tying]") {
    const IntTensor src = IntTensor::from_vector({4, 5, 6, 0, 7, 8, 4, 5}, {2, 4});
    const IntTensor tgt = IntTensor::from_vector({1, 4, 8, 2, 1, 6, 2, 0}, {2, 4});
    const IntTensor tgt_in = tgt.slice_last(0, 3), tgt_out = tgt.slice_last(1, 4);

    struct Case {
        bool share, tie;
        std::vector<std::string> missing;  // names the untied model has and this lacks
        std::string kept;                  // the one registered name
        std::vector<std::string> uses;     // the untied parameters it stands for
    };
    const std::vector<Case> cases = {
        {true,
         false,
         {"tgt_embedding.weight"},
         "src_embedding.weight",
         {"src_embedding.weight", "tgt_embedding.weight"}},
        {false, true, {"output.weight"}, "tgt_embedding.weight", {"tgt_embedding.weight", "output.weight"}},
        {true,
         true,
         {"tgt_embedding.weight", "output.weight"},
         "src_embedding.weight",
         {"src_embedding.weight", "tgt_embedding.weight", "output.weight"}},
    };
    for (const Case& c : cases) {
        INFO("share_embeddings " << c.share << ", tie_output " << c.tie);
        ModelConfig config = small_config("pre");
        config.src_vocab = config.tgt_vocab = 9;
        keys_of(config).share_embeddings = c.share;
        keys_of(config).tie_output = c.tie;
        Generator gen(8);
        Transformer tied(config, gen);

        // Listed once: no two parameters share storage, and the aliases are not in state_dict.
        const nn::NamedTensors params = tied.named_parameters();
        std::set<const float*> storages;
        for (const auto& [name, p] : params) storages.insert(p.data());
        CHECK(storages.size() == params.size());
        CHECK(names_of(tied.state_dict()) == names_of(params));
        for (const std::string& name : c.missing) {
            const auto names = names_of(params);
            CHECK(std::find(names.begin(), names.end(), name) == names.end());
        }
        CHECK(tied.tied_aliases().size() == c.missing.size());
        for (const auto& [alias, registered] : tied.tied_aliases()) CHECK(registered == c.kept);
        if (c.share) CHECK(tied.tgt_embedding->weight.data() == tied.src_embedding->weight.data());
        if (c.tie) CHECK(tied.output->weight.data() == tied.tgt_embedding->weight.data());

        // The same weights untied: the tied gradient is the sum of the untied ones.
        ModelConfig untied_config = config;
        keys_of(untied_config).share_embeddings = keys_of(untied_config).tie_output = false;
        Transformer untied(untied_config, gen);
        std::map<std::string, Tensor> state;
        for (const auto& [name, p] : tied.state_dict()) state[name] = p;
        for (const auto& [alias, registered] : tied.tied_aliases()) state[alias] = state.at(registered);
        untied.load_state_dict(state);

        const auto tied_grads = gradients(tied, src, tgt_in, tgt_out);
        const auto untied_grads = gradients(untied, src, tgt_in, tgt_out);
        Tensor summed = untied_grads.at(c.uses[0]);
        for (size_t i = 1; i < c.uses.size(); ++i) summed = add(summed, untied_grads.at(c.uses[i]));
        testing::require_close(tied_grads.at(c.kept), summed, "tied gradient", 1e-5f, 1e-4f);
        for (const auto& [name, g] : tied_grads)
            if (name != c.kept) testing::require_close(g, untied_grads.at(name), name, 1e-5f, 1e-4f);

        // An optimizer steps the shared tensor once: one Adam step moves each weight by about lr.
        nn::AdamOptions options;
        options.lr = 0.01;
        nn::Adam adam(tied.named_parameters(), options);
        const Tensor shared = c.share ? tied.src_embedding->weight : tied.tgt_embedding->weight;
        const std::vector<float> before = shared.to_vector();
        adam.step();
        const std::vector<float> after = shared.to_vector();
        for (size_t i = 0; i < before.size(); ++i) CHECK(std::fabs(after[i] - before[i]) <= 0.0101f);
    }

    ModelConfig bad = small_config("post");
    keys_of(bad).share_embeddings = true;  // src_vocab 7, tgt_vocab 9
    Generator gen(9);
    CHECK_THROWS_WITH(Transformer(bad, gen), Contains("share_embeddings needs equal vocabularies"));
    // Sizes from data: shared embeddings are kept for one vocabulary size and let go for two.
    set_vocabulary_sizes(bad, 12, 12);
    CHECK(keys_of(bad).share_embeddings);
    set_vocabulary_sizes(bad, 12, 13);
    CHECK_FALSE(keys_of(bad).share_embeddings);
}

// ---- errors ----

TEST_CASE("bad input is a clear seqgrad::Error", "[transformer]") {
    Generator gen(10);
    Transformer model(small_config("post"), gen);  // src_vocab 7, tgt_vocab 9, max_seq_len 10
    const IntTensor src = IntTensor::from_vector({4, 5, 6, 0}, {2, 2});
    const IntTensor tgt_in = IntTensor::from_vector({1, 4, 1, 8}, {2, 2});

    CHECK_THROWS_AS(model.forward(IntTensor::from_vector({4, 7, 6, 0}, {2, 2}), tgt_in), Error);
    CHECK_THROWS_WITH(model.forward(IntTensor::from_vector({4, 7, 6, 0}, {2, 2}), tgt_in),
                      Contains("src id 7 at [0, 1]") && Contains("outside the vocabulary [0, 7)"));
    CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 9, 1, 8}, {2, 2})),
                      Contains("tgt_in id 9") && Contains("[0, 9)"));
    CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, -1, 1, 8}, {2, 2})), Contains("tgt_in id -1"));

    CHECK_THROWS_WITH(model.forward(src, IntTensor::from_vector({1, 4, 5}, {3, 1})),
                      Contains("tgt_in must be [2, len] for src [2, 2], got [3, 1]"));
    {  // refused before any dropout mask is drawn
        ModelConfig with_dropout = small_config("post");
        with_dropout.dropout = 0.1f;
        Transformer dropping(with_dropout, gen);
        const Generator::State random_before = dropping.random().state();
        CHECK_THROWS(dropping.forward(src, IntTensor::from_vector({1, 4, 5}, {3, 1})));
        CHECK(dropping.random().state() == random_before);
        dropping.forward(src, tgt_in);
        CHECK(dropping.random().state() != random_before);  // (a call that runs does draw)
    }
    CHECK_THROWS_WITH(model.forward(IntTensor::from_vector({4, 5}, {2}), tgt_in),
                      Contains("Transformer: src must be [batch >= 1, len >= 1], got [2]"));

    CHECK_THROWS_WITH(model.forward(IntTensor::full({1, 11}, 4), IntTensor::full({1, 2}, 4)),
                      Contains("src length 11 exceeds max_seq_len 10"));
    CHECK_THROWS_WITH(model.forward(IntTensor::full({1, 2}, 4), IntTensor::full({1, 11}, 4)),
                      Contains("tgt_in length 11 exceeds max_seq_len 10"));
    CHECK_NOTHROW(model.forward(IntTensor::full({1, 10}, 4), IntTensor::full({1, 10}, 4)));

    const EncoderOutput encoded = model.encode(src);
    CHECK_THROWS_WITH(model.decode(IntTensor::full({3, 2}, 4), encoded.memory, encoded.src_mask),
                      Contains("memory must be"));

    ModelConfig odd_heads = small_config("post");
    keys_of(odd_heads).n_heads = 3;  // d_model 4
    CHECK_THROWS_AS(Transformer(odd_heads, gen), Error);
    CHECK_THROWS_WITH(Transformer(odd_heads, gen), Contains("d_model 4 is not divisible by n_heads 3"));
    CHECK_THROWS_WITH(ModelConfig::from_json(R"({"model": "transformer", "src_vocab": 8, "tgt_vocab": 8,
                                                 "d_model": 10, "n_heads": 4, "norm": "post"})"),
                      Contains("not divisible by n_heads"));
    ModelConfig odd_width = small_config("post");
    keys_of(odd_width).d_model = 3;
    keys_of(odd_width).n_heads = 1;
    CHECK_THROWS_WITH(Transformer(odd_width, gen), Contains("d_model must be even"));
}
