// Model summaries and the tracing behind them: the shape walk-through of the paper-sized
// Transformer reproduced shape for shape, exact lines for a small Transformer, parameter counts
// that add up, all three models, folding of alike layers, and tracing that changes nothing (and
// records nothing) when off.
#include "helpers.h"

#include <sstream>

#include "seqgrad/models/registry.h"
#include "seqgrad/models/summary.h"
#include "seqgrad/models/transformer.h"
#include "seqgrad/nn/trace.h"

using namespace seqgrad;
using namespace seqgrad::models;

namespace {

ModelConfig small_transformer() {
    ModelConfig c = model_kind("transformer").defaults();
    c.src_vocab = 11;
    c.tgt_vocab = 13;
    c.dropout = 0.1f;
    TransformerKeys& t = c.keys<TransformerKeys>();
    t.d_model = 8;
    t.n_heads = 2;
    t.n_layers = t.n_enc_layers = t.n_dec_layers = 2;
    t.d_ff = 16;
    t.max_seq_len = 20;
    return c;
}

ModelConfig small_lstm(const std::string& model) {
    ModelConfig c = model_kind(model).defaults();
    c.src_vocab = 11;
    c.tgt_vocab = 13;
    testing::lstm_of(c).hidden_size = 6;
    testing::lstm_of(c).num_layers = 2;
    return c;
}

std::shared_ptr<Model> build(const ModelConfig& config) {
    Generator gen(7);
    return make_model(config, gen);
}

// The outputs of the modules under `prefix` (e.g. "encoder_layers.0."), in order.
std::vector<TracedOutput> under(const std::vector<TracedOutput>& outputs, const std::string& prefix) {
    std::vector<TracedOutput> found;
    for (const TracedOutput& o : outputs)
        if (o.path.rfind(prefix, 0) == 0) found.push_back(o);
    return found;
}

std::vector<Shape> shapes_of(const std::vector<TracedOutput>& outputs) {
    std::vector<Shape> shapes;
    for (const TracedOutput& o : outputs) shapes.push_back(o.shape);
    return shapes;
}

// A line with runs of spaces made single, so tests do not depend on column widths.
std::string squeezed(const std::string& line) {
    std::istringstream words(line);
    std::string word, out;
    while (words >> word) out += (out.empty() ? "" : " ") + word;
    return out;
}

std::vector<std::string> squeezed_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(squeezed(line));
    return lines;
}

bool has_line(const std::string& text, const std::string& line) {
    const std::vector<std::string> lines = squeezed_lines(text);
    return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// 1234567 -> "1,234,567", as the table prints counts.
std::string commas(int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return out;
}

int64_t sum_of_groups(const ModelSummary& summary) {
    int64_t total = 0;
    for (const ModuleInfo& g : summary.groups) total += g.parameters;
    return total;
}

int64_t sum_of_own(const ModelSummary& summary) {
    int64_t total = 0;
    for (const ModuleInfo& m : summary.modules) total += m.own_parameters;
    return total;
}

// Counts reports, to see whether anything reached it.
struct CountingRecorder : nn::TraceRecorder {
    int64_t reports = 0;
    void record(const nn::Module&, std::string_view, const Tensor&) override { ++reports; }
};

}  // namespace

TEST_CASE("summary reproduces the shape walk-through of the paper-sized Transformer", "[summary]") {
    // batch 32, source 10, target 12, d_model 512, 8 heads, d_ff 2048, vocabularies 10000/12000.
    auto model = build(summary_default_config("transformer"));
    const ModelSummary summary = summarize(*model);

    REQUIRE(summary.outputs.front() == TracedOutput{"src_embedding", "Embedding", "", {32, 10, 512}});
    // 1.2: Q, K, V; split into heads; scores; softmax; weights times V; heads merged; W_o; add & norm;
    // the feed-forward network; add & norm.
    const std::vector<Shape> encoder_layer = {{32, 10, 512},   {32, 10, 512},   {32, 10, 512},   {32, 8, 10, 64},
                                              {32, 8, 10, 64}, {32, 8, 10, 64}, {32, 8, 10, 10}, {32, 8, 10, 10},
                                              {32, 8, 10, 64}, {32, 10, 512},   {32, 10, 512},   {32, 10, 512},
                                              {32, 10, 2048},  {32, 10, 2048},  {32, 10, 512},   {32, 10, 512}};
    CHECK(shapes_of(under(summary.outputs, "encoder_layers.0.")) == encoder_layer);
    CHECK(under(summary.outputs, "tgt_embedding") ==
          std::vector<TracedOutput>{{"tgt_embedding", "Embedding", "", {32, 12, 512}}});
    // 2.2: masked self-attention [.., 12, 12]; cross-attention with queries of 12 positions and keys
    // and values of 10; the feed-forward network.
    const std::vector<Shape> decoder_layer = {
        {32, 12, 512},   {32, 12, 512},   {32, 12, 512},   {32, 8, 12, 64}, {32, 8, 12, 64}, {32, 8, 12, 64},
        {32, 8, 12, 12}, {32, 8, 12, 12}, {32, 8, 12, 64}, {32, 12, 512},   {32, 12, 512},   {32, 12, 512},
        {32, 12, 512},   {32, 10, 512},   {32, 10, 512},   {32, 8, 12, 64}, {32, 8, 10, 64}, {32, 8, 10, 64},
        {32, 8, 12, 10}, {32, 8, 12, 10}, {32, 8, 12, 64}, {32, 12, 512},   {32, 12, 512},   {32, 12, 512},
        {32, 12, 2048},  {32, 12, 2048},  {32, 12, 512},   {32, 12, 512}};
    CHECK(shapes_of(under(summary.outputs, "decoder_layers.0.")) == decoder_layer);
    // The final linear layer's logits.
    CHECK(summary.outputs.back() == TracedOutput{"", "Transformer", "logits", {32, 12, 12000}});

    const std::string text = format_summary(summary);
    CHECK(has_line(text, "decoder_layers.0.cross_attention MultiHeadAttention scores [32, 8, 12, 10]"));
    CHECK(has_line(text, "encoder_layers.1-5 5 x EncoderLayer as encoder_layers.0 15,761,920"));
    CHECK(summary.total_parameters == model->num_parameters());
}

TEST_CASE("summary of a small Transformer: every step of a layer, in order, and its table lines", "[summary]") {
    auto model = build(small_transformer());
    const ModelSummary summary = summarize(*model, {3, 4, 5});

    const std::vector<TracedOutput> encoder_layer = {
        {"encoder_layers.0.attention.wq", "Linear", "", {3, 4, 8}},
        {"encoder_layers.0.attention.wk", "Linear", "", {3, 4, 8}},
        {"encoder_layers.0.attention.wv", "Linear", "", {3, 4, 8}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "q heads", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "k heads", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "v heads", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "scores", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "weights", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "context", {3, 2, 4, 4}},
        {"encoder_layers.0.attention", "MultiHeadAttention", "merged", {3, 4, 8}},
        {"encoder_layers.0.attention.wo", "Linear", "", {3, 4, 8}},
        {"encoder_layers.0.attention_norm", "LayerNorm", "", {3, 4, 8}},
        {"encoder_layers.0.feed_forward.w1", "Linear", "", {3, 4, 16}},
        {"encoder_layers.0.feed_forward", "FeedForward", "relu", {3, 4, 16}},
        {"encoder_layers.0.feed_forward.w2", "Linear", "", {3, 4, 8}},
        {"encoder_layers.0.ffn_norm", "LayerNorm", "", {3, 4, 8}}};
    CHECK(under(summary.outputs, "encoder_layers.0.") == encoder_layer);

    const std::vector<TracedOutput> cross_attention = {
        {"decoder_layers.1.cross_attention.wq", "Linear", "", {3, 5, 8}},
        {"decoder_layers.1.cross_attention.wk", "Linear", "", {3, 4, 8}},
        {"decoder_layers.1.cross_attention.wv", "Linear", "", {3, 4, 8}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "q heads", {3, 2, 5, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "k heads", {3, 2, 4, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "v heads", {3, 2, 4, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "scores", {3, 2, 5, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "weights", {3, 2, 5, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "context", {3, 2, 5, 4}},
        {"decoder_layers.1.cross_attention", "MultiHeadAttention", "merged", {3, 5, 8}},
        {"decoder_layers.1.cross_attention.wo", "Linear", "", {3, 5, 8}}};
    CHECK(under(summary.outputs, "decoder_layers.1.cross_attention") == cross_attention);

    const std::string text = format_summary(summary);
    INFO(text);
    CHECK(squeezed_lines(text).front() ==
          "Transformer: one forward pass in evaluation mode over src [3, 4] and tgt_in [3, 5]");
    CHECK(has_line(text, "Module Type Step Output Parameters"));
    CHECK(has_line(text, "src_embedding Embedding [3, 4, 8] 88"));
    CHECK(has_line(text, "encoder_layers.0.attention.wq Linear [3, 4, 8] 72"));
    CHECK(has_line(text, "encoder_layers.0.attention MultiHeadAttention q heads [3, 2, 4, 4] 0"));
    CHECK(has_line(text, "encoder_layers.0.attention MultiHeadAttention scores [3, 2, 4, 4]"));
    CHECK(has_line(text, "encoder_layers.0.feed_forward FeedForward relu [3, 4, 16] 0"));
    CHECK(has_line(text, "encoder_layers.0.ffn_norm LayerNorm [3, 4, 8] 16"));
    CHECK(has_line(text, "(model) Transformer logits [3, 5, 13] 0"));
    // The second layer of each stack computes what the first did: one line stands for it.
    const int64_t encoder_layer_parameters =
        (*std::dynamic_pointer_cast<Transformer>(model)->encoder_layers)[1]->num_parameters();
    CHECK(has_line(text, "encoder_layers.1 1 x EncoderLayer as encoder_layers.0 " + commas(encoder_layer_parameters)));
    CHECK(text.find("encoder_layers.1.attention") == std::string::npos);
    CHECK(has_line(text, "encoder_layers 2 x EncoderLayer " + commas(2 * encoder_layer_parameters)));
    // The output projection reports its logits, so no module holding parameters goes unseen.
    CHECK(has_line(text, "output OutputProjection [3, 5, 13] 117"));
    CHECK(text.find("Not traced") == std::string::npos);

    const std::string every_layer = format_summary(summary, true);
    CHECK(has_line(every_layer, "encoder_layers.1.attention.wq Linear [3, 4, 8] 72"));
    CHECK(every_layer.find("as encoder_layers.0") == std::string::npos);
}

TEST_CASE("summary parameter counts add up to num_parameters for every model", "[summary]") {
    ModelConfig tied = small_transformer();
    tied.tgt_vocab = tied.src_vocab;
    tied.keys<TransformerKeys>().share_embeddings = true;
    tied.keys<TransformerKeys>().tie_output = true;
    ModelConfig pre_norm = small_transformer();
    pre_norm.keys<TransformerKeys>().norm = "pre";
    ModelConfig additive = small_lstm("attn_seq2seq");
    additive.keys<AttnSeq2SeqKeys>().attention = "additive";
    ModelConfig context_input = small_lstm("seq2seq");
    context_input.keys<Seq2SeqKeys>().decoder = "context_input";
    for (const ModelConfig& config : {small_transformer(), tied, pre_norm, small_lstm("seq2seq"), context_input,
                                      small_lstm("attn_seq2seq"), additive}) {
        INFO(config.to_json());
        auto model = build(config);
        const ModelSummary summary = summarize(*model, {2, 3, 4});
        CHECK(summary.total_parameters == model->num_parameters());
        CHECK(sum_of_groups(summary) == model->num_parameters());
        CHECK(sum_of_own(summary) == model->num_parameters());
        CHECK(has_line(format_summary(summary), "total " + commas(model->num_parameters())));
    }
}

TEST_CASE("summary works for the LSTM models, with a recurrent decoder's steps folded", "[summary]") {
    SECTION("seq2seq") {
        auto model = build(small_lstm("seq2seq"));
        const ModelSummary summary = summarize(*model, {2, 3, 4});
        const std::vector<TracedOutput> expected = {
            {"encoder.embedding", "Embedding", "", {2, 3, 6}}, {"encoder.rnn", "LSTM", "", {2, 3, 6}},
            {"encoder.rnn", "LSTM", "h_n", {2, 2, 6}},         {"encoder.rnn", "LSTM", "c_n", {2, 2, 6}},
            {"decoder.embedding", "Embedding", "", {2, 4, 6}}, {"decoder.rnn", "LSTM", "", {2, 4, 6}},
            {"decoder.rnn", "LSTM", "h_n", {2, 2, 6}},         {"decoder.rnn", "LSTM", "c_n", {2, 2, 6}},
            {"decoder.fc", "Linear", "", {2, 4, 13}},          {"", "Seq2Seq", "logits", {2, 4, 13}}};
        CHECK(summary.outputs == expected);
    }
    SECTION("attn_seq2seq") {
        auto model = build(small_lstm("attn_seq2seq"));
        const ModelSummary summary = summarize(*model, {2, 3, 4});
        CHECK(under(summary.outputs, "encoder.rnn") ==
              std::vector<TracedOutput>{{"encoder.rnn", "LSTM", "", {2, 3, 12}},  // both directions
                                        {"encoder.rnn", "LSTM", "h_n", {4, 2, 6}},
                                        {"encoder.rnn", "LSTM", "c_n", {4, 2, 6}}});
        // The decoder attends and steps its LSTM once per target position.
        CHECK(under(summary.outputs, "decoder.attention").size() == 4);
        CHECK(under(summary.outputs, "decoder.attention").front() ==
              TracedOutput{"decoder.attention", "AttentionSimple", "", {2, 3}});
        const std::string text = format_summary(summary);
        INFO(text);
        CHECK(has_line(text, "decoder.attention AttentionSimple [2, 3] x4 0"));
        CHECK(has_line(text, "decoder.rnn LSTM h_n [2, 2, 6] x4"));
        CHECK(has_line(text, "(model) AttnSeq2Seq logits [2, 4, 13] 0"));
    }
}

TEST_CASE("tracing is off by default and changes no result when on", "[summary]") {
    auto model = build(small_transformer());
    model->eval();
    const IntTensor src = IntTensor::from_vector({4, 5, 6, 7, 8, 9}, {2, 3});
    const IntTensor tgt_in = IntTensor::from_vector({1, 5, 6, 1, 7, 8}, {2, 3});

    CountingRecorder counter;
    {
        nn::TraceGuard tracing(counter);
        model->logits(src, tgt_in);
    }
    const int64_t while_installed = counter.reports;
    CHECK(while_installed > 0);
    const Tensor untraced = model->logits(src, tgt_in);
    CHECK(counter.reports == while_installed);  // the guard is gone: nothing more arrives

    Tensor traced;
    const std::vector<TracedOutput> outputs = trace_outputs(*model, [&] { traced = model->logits(src, tgt_in); });
    CHECK(static_cast<int64_t>(outputs.size()) == while_installed);
    REQUIRE(traced.shape() == untraced.shape());
    // Traced, attention runs as its composition of primitives (its scores and weights are reported),
    // whose products round in another order than the fused operation's: equal within float32's
    // rounding, not bit for bit. (Logits of up to 2.4 here; 1.2e-6 apart, five units in the last
    // place, in the sanitizers' -O2 build, where matmul's loops for the per-head products sum in
    // another order than at -O3.)
    CHECK(testing::max_abs_diff(traced, untraced) < 1e-5f);
    CHECK(counter.reports == while_installed);
}

TEST_CASE("trace guards nest and restore the recorder before them", "[summary]") {
    Generator gen(1);
    nn::Linear layer(3, 2, gen);
    const Tensor x = Tensor::ones({1, 3});
    CountingRecorder outer, inner;
    {
        nn::TraceGuard outer_guard(outer);
        layer.forward(x);
        {
            nn::TraceGuard inner_guard(inner);
            layer.forward(x);
        }
        layer.forward(x);
    }
    CHECK(outer.reports == 2);
    CHECK(inner.reports == 1);
    // A module outside the root's tree is still reported, under a name that says so.
    nn::Linear other(3, 2, gen);
    const std::vector<TracedOutput> outputs = trace_outputs(layer, [&] { other.forward(x); });
    CHECK(outputs == std::vector<TracedOutput>{{"(outside the model)", "Linear", "", {1, 2}}});
}

TEST_CASE("summary leaves the model in the mode it found it and checks its sizes", "[summary]") {
    auto model = build(small_transformer());
    REQUIRE(model->is_training());
    summarize(*model, {2, 3, 4});
    CHECK(model->is_training());
    model->eval();
    summarize(*model, {2, 3, 4});
    CHECK_FALSE(model->is_training());

    CHECK_THROWS_WITH(summarize(*model, {0, 3, 4}), Catch::Matchers::Contains("at least 1"));
    // Longer than the model's max_seq_len: the model's own error comes through.
    CHECK_THROWS_WITH(summarize(*model, {2, 30, 4}), Catch::Matchers::Contains("max_seq_len"));
    CHECK_THROWS_WITH(summary_default_config("gru"), Catch::Matchers::Contains("unknown model \"gru\""));
}

TEST_CASE("summary's default configs are the paper-sized Transformer and 256-wide, 2-layer LSTMs", "[summary]") {
    const ModelConfig t = summary_default_config("transformer");
    CHECK(t.keys<TransformerKeys>().d_model == 512);
    CHECK(t.keys<TransformerKeys>().n_heads == 8);
    CHECK(t.keys<TransformerKeys>().n_enc_layers == 6);
    CHECK(t.keys<TransformerKeys>().n_dec_layers == 6);
    CHECK(t.keys<TransformerKeys>().d_ff == 2048);
    CHECK(t.src_vocab == 10000);
    CHECK(t.tgt_vocab == 12000);
    const ModelConfig l = summary_default_config("attn_seq2seq");
    CHECK(l.keys<AttnSeq2SeqKeys>().hidden_size == 256);
    CHECK(l.keys<AttnSeq2SeqKeys>().num_layers == 2);
    CHECK(l.src_vocab == 10000);
    CHECK(l.tgt_vocab == 12000);
}

TEST_CASE("module type names drop their namespaces", "[summary]") {
    auto model = build(small_transformer());
    const auto& transformer = dynamic_cast<const Transformer&>(*model);
    CHECK(module_type_name(transformer) == "Transformer");
    CHECK(module_type_name(*transformer.encoder_layers) == "ModuleList<EncoderLayer>");
    CHECK(module_type_name(*transformer.encoder_layers->begin()->get()->attention) == "MultiHeadAttention");
}
