// Every model kind in the registry, held to what the searches, the tools and the checkpoints rely
// on: decoding step by step, or a prefix in one pass, gives the forward pass's logits; reordering a
// state's rows (beam search) continues as decoding those rows would; the parameter count is the
// kind's own count and the summary's; a saved model loads to the same logits; a truncated file is
// refused; its config holds its own keys and reads back what it writes. A kind is checked here by
// being registered: its variants are the values of the keys it reads that change how it decodes.
// A kind that does not decode (an encoder: ModelKind::decodes false) is held to the rest, its
// logits those of every position read whole.
#include <algorithm>
#include <filesystem>
#include <map>

#include "helpers.h"
#include "seqgrad/models/summary.h"

using namespace seqgrad;
using namespace seqgrad::models;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kRows = 3, kSteps = 7;

bool reads(const ModelKind& kind, const std::string& key) {
    const std::vector<std::string> keys = kind.config_keys();
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// A small model of the kind: every size key it reads made small, each vocabulary its own size.
ModelConfig small_config(const ModelKind& kind) {
    static const std::map<std::string, std::string> sizes = {
        {"d_model", "16"}, {"n_heads", "2"},     {"n_layers", "2"},   {"n_enc_layers", "2"}, {"n_dec_layers", "2"},
        {"d_ff", "24"},    {"hidden_size", "8"}, {"num_layers", "2"}, {"context", "16"},     {"max_seq_len", "32"},
    };
    ModelConfig c = kind.defaults();
    for (const auto& [key, value] : sizes)
        if (reads(kind, key)) c.set(key, {value});
    int64_t vocab = 11;
    for (const std::string& key : kind.vocabularies) c.set(key, {std::to_string(vocab++)});
    c.dropout = 0.1f;  // evaluation turns it off
    return c;
}

// The kind's small config, and one more for each other value of a key that changes how it decodes.
std::vector<std::pair<std::string, ModelConfig>> variants(const ModelKind& kind) {
    static const std::map<std::string, std::vector<std::string>> choices = {
        {"norm", {"pre"}},
        {"positional", {"sinusoidal", "learned", "rope"}},
        {"decoder", {"init_state", "context_input"}},
        {"attention", {"dot", "additive"}},
        {"type_vocab", {"0"}},
        {"n_classes", {"0"}},
    };
    const ModelConfig base = small_config(kind);
    std::vector<std::pair<std::string, ModelConfig>> out = {{kind.name, base}};
    for (const auto& [key, values] : choices) {
        if (!reads(kind, key)) continue;
        for (const std::string& value : values) {
            ModelConfig c = base;
            c.set(key, {value});
            if (c.to_json() != base.to_json()) out.push_back({kind.name + " " + key + "=" + value, c});
        }
    }
    return out;
}

int64_t output_vocab(const ModelKind& kind, const ModelConfig& c) {
    return kind.vocabularies.back() == "vocab" ? c.vocab : c.tgt_vocab;
}

// Ragged sources with padding ([rows, 0] for a language model), and inputs of ordinary tokens
// (<s> first for a sequence-to-sequence model).
IntTensor sources(const ModelKind& kind, const ModelConfig& c) {
    if (kind.vocabularies.size() < 2) return IntTensor::zeros({kRows, 0});
    Generator gen(11);
    const int64_t lengths[kRows] = {6, 3, 5};
    IntTensor src = IntTensor::full({kRows, 6}, kPad);
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t t = 0; t < lengths[r]; ++t)
            src.data()[r * 6 + t] = 4 + static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(c.src_vocab - 4));
    return src;
}

IntTensor inputs(const ModelKind& kind, int64_t vocab) {
    Generator gen(12);
    IntTensor in = IntTensor::zeros({kRows, kSteps});
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t t = 0; t < kSteps; ++t)
            in.data()[r * kSteps + t] = 4 + static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(vocab - 4));
    if (kind.vocabularies.size() == 2)
        for (int64_t r = 0; r < kRows; ++r) in.data()[r * kSteps] = kSos;
    return in;
}

IntTensor column(const IntTensor& ids, int64_t t) {
    std::vector<int64_t> out;
    for (int64_t r = 0; r < ids.size(0); ++r) out.push_back(ids.data()[r * ids.size(1) + t]);
    return IntTensor::from_vector(out, {ids.size(0)});
}

IntTensor rows_of(const IntTensor& ids, const std::vector<int64_t>& rows) {
    const int64_t width = ids.size(1);
    std::vector<int64_t> out;
    for (int64_t r : rows)
        for (int64_t t = 0; t < width; ++t) out.push_back(ids.data()[r * width + t]);
    return IntTensor::from_vector(out, {static_cast<int64_t>(rows.size()), width});
}

IntTensor prefix(const IntTensor& ids, int64_t length) { return rows_of(ids, {0, 1, 2}).slice_last(0, length); }

Tensor position(const Tensor& logits, int64_t t) {
    return reshape(slice(logits, 1, t, t + 1), {logits.size(0), logits.size(2)});
}

Tensor pick_rows(const Tensor& logits, const std::vector<int64_t>& rows) {
    const int64_t v = logits.size(1);
    std::vector<float> out;
    for (int64_t r : rows)
        for (int64_t j = 0; j < v; ++j) out.push_back(logits.data()[r * v + j]);
    return Tensor::from_vector(out, {static_cast<int64_t>(rows.size()), v});
}

text::TextSides sides_for(const ModelConfig& c) {
    // Vocabularies of the config's sizes: the four specials, then symbols.
    auto vocabulary = [](int64_t size) {
        std::vector<std::string> symbols;
        for (int64_t i = 4; i < size; ++i) symbols.push_back("s" + std::to_string(i));
        return text::Vocabulary::from_symbols(symbols);
    };
    text::TextSides sides;
    const bool one = model_kind(c.model).vocabularies.size() == 1;
    sides.target_vocab = vocabulary(one ? c.vocab : c.tgt_vocab);
    sides.source_vocab = one ? sides.target_vocab : vocabulary(c.src_vocab);
    return sides;
}

}  // namespace

TEST_CASE("every model kind decodes step by step and by prefix as its forward pass computes", "[conformance]") {
    for (const ModelKind& kind : model_kinds()) {
        if (!kind.decodes) {  // it says so when asked to
            INFO(kind.name);
            Generator gen(5);
            auto model = make_model(small_config(kind), gen);
            CHECK_THROWS_WITH(model->start_decoding(IntTensor::zeros({kRows, 0})), Contains("not available"));
            continue;
        }
        for (const auto& [name, config] : variants(kind)) {
            INFO(name);
            Generator gen(5);
            auto model = make_model(config, gen);
            model->eval();
            NoGradGuard no_grad;
            const int64_t vocab = output_vocab(kind, config);
            const IntTensor src = sources(kind, config), in = inputs(kind, vocab);
            const Tensor full = model->logits(src, in);  // [rows, steps, vocab]
            REQUIRE(full.shape() == Shape{kRows, kSteps, vocab});

            auto state = model->start_decoding(src);
            for (int64_t t = 0; t < kSteps; ++t) {
                INFO("step " << t + 1);
                CHECK(testing::max_abs_diff(model->decode_step(*state, column(in, t)), position(full, t)) < 1e-5f);
            }
            // A prefix in one pass ends where stepping through it does, and goes on alike.
            auto prefilled = model->start_decoding(src);
            CHECK(testing::max_abs_diff(model->prefill(*prefilled, prefix(in, 4)), position(full, 3)) < 1e-5f);
            CHECK(testing::max_abs_diff(model->decode_step(*prefilled, column(in, 4)), position(full, 4)) < 1e-5f);

            // A state another decoder made is refused.
            struct OtherState : DecodingState {
                void select_rows(const std::vector<int64_t>&) override {}
            } other;
            CHECK_THROWS_WITH(model->decode_step(other, column(in, 0)),
                              Contains("not made by this decoder's start_decoding"));
        }
    }
}

TEST_CASE("every model kind's decoding state reorders, repeats and drops rows as beam search asks", "[conformance]") {
    for (const ModelKind& kind : model_kinds()) {
        if (!kind.decodes) continue;
        for (const auto& [name, config] : variants(kind)) {
            INFO(name);
            Generator gen(6);
            auto model = make_model(config, gen);
            model->eval();
            NoGradGuard no_grad;
            const IntTensor src = sources(kind, config), in = inputs(kind, output_vocab(kind, config));
            // Two beams for each of the first two sources, the rows fed different tokens.
            const std::vector<int64_t> beams = {0, 0, 1, 1};
            const IntTensor src4 = kind.vocabularies.size() == 2 ? rows_of(src, beams) : IntTensor::zeros({4, 0});
            const IntTensor in4 = rows_of(in, {0, 2, 1, 0});
            auto whole = model->start_decoding(src4);
            auto moved = model->start_decoding(src4);
            for (int64_t t = 0; t < 3; ++t) {
                model->decode_step(*whole, column(in4, t));
                model->decode_step(*moved, column(in4, t));
            }
            // Within each source's group of two: row i continues row rows[i].
            const std::vector<int64_t> rows = {1, 1, 3, 2};
            moved->reorder_beams(rows, 2);
            const IntTensor next = column(in4, 3);
            const Tensor expected = pick_rows(model->decode_step(*whole, next), rows);
            CHECK(testing::max_abs_diff(model->decode_step(*moved, column(rows_of(in4, rows), 3)), expected) < 1e-5f);

            // Any rows, repeated or left out (a source that is done).
            auto picked = model->start_decoding(src4);
            for (int64_t t = 0; t < 4; ++t) model->decode_step(*picked, column(in4, t));
            const std::vector<int64_t> some = {3, 0, 0};
            picked->select_rows(some);
            auto again = model->start_decoding(src4);
            for (int64_t t = 0; t < 4; ++t) model->decode_step(*again, column(in4, t));
            const Tensor all = model->decode_step(*again, column(in4, 4));
            CHECK(testing::max_abs_diff(model->decode_step(*picked, column(rows_of(in4, some), 4)),
                                        pick_rows(all, some)) < 1e-5f);
        }
    }
}

TEST_CASE("every model kind counts its parameters as its kind and its summary do", "[conformance]") {
    for (const ModelKind& kind : model_kinds()) {
        for (const auto& [name, config] : variants(kind)) {
            INFO(name);
            Generator gen(7);
            auto model = make_model(config, gen);
            const ModelSummary summary = summarize(*model, {.batch = 2, .src_len = 5, .tgt_len = 6});
            CHECK(kind.parameters(config) == model->num_parameters());
            CHECK(summary.total_parameters == model->num_parameters());
            int64_t groups = 0;
            for (const ModuleInfo& g : summary.groups) groups += g.parameters;
            CHECK(groups == model->num_parameters());
        }
    }
}

TEST_CASE("every model kind saves and loads to the same logits, and a truncated file is refused", "[conformance]") {
    const testing::TempDir dir("conformance");
    for (const ModelKind& kind : model_kinds()) {
        for (const auto& [name, config] : variants(kind)) {
            INFO(name);
            Generator gen(8);
            auto model = make_model(config, gen);
            model->eval();
            const std::string path = dir.fresh(kind.name + ".safetensors");
            text::save_model(path, *model, sides_for(config), kind.vocabularies.size() == 2 ? "corpus" : "text", 3);
            const text::LoadedModel loaded = text::load_model(path);
            CHECK(loaded.model->config().to_json() == config.to_json());
            CHECK(loaded.step == 3);
            NoGradGuard no_grad;
            const IntTensor src = sources(kind, config), in = inputs(kind, output_vocab(kind, config));
            CHECK(testing::max_abs_diff(loaded.model->logits(src, in), model->logits(src, in)) == 0.0f);

            const auto size = std::filesystem::file_size(path);
            std::filesystem::resize_file(path, size - 7);
            CHECK_THAT(testing::error_of([&] { text::load_model(path); }), Contains(path));
        }
    }
}

TEST_CASE("every model kind's config holds its own keys, reads back what it writes, and lists each key once",
          "[conformance][config]") {
    std::vector<std::string> every_key;
    for (const ModelKind& kind : model_kinds()) {
        INFO(kind.name);
        const ModelConfig defaults = kind.defaults();
        CHECK(defaults.model == kind.name);
        for (const auto& [name, config] : variants(kind)) {
            INFO(name);
            CHECK(ModelConfig::from_json(config.to_json()).to_json() == config.to_json());
        }
        for (const std::string& key : kind.config_keys())
            if (std::find(every_key.begin(), every_key.end(), key) == every_key.end()) every_key.push_back(key);
    }
    // The command line's flags: every key of every kind, once.
    std::vector<std::string> flags;
    for (const OptionInfo& option : ModelConfig::options()) flags.push_back(option.key);
    std::sort(every_key.begin(), every_key.end());
    std::sort(flags.begin(), flags.end());
    CHECK(flags == every_key);
}

TEST_CASE("a config's keys are its kind's struct: another kind's is an Error, and a new kind starts from its defaults",
          "[conformance][config]") {
    ModelConfig gpt = model_kind("gpt").defaults();
    CHECK(gpt.keys<GptKeys>().d_model == 768);
    CHECK(gpt.keys<GptKeys>().positional == "learned");
    CHECK_THROWS_WITH(gpt.keys<TransformerKeys>(), Contains("the keys asked for are a \"transformer\" model's, but "
                                                            "the config (model \"gpt\") holds a \"gpt\" model's"));
    CHECK_THROWS_WITH(ModelConfig{}.keys<Seq2SeqKeys>(), Contains("holds none"));
    gpt.model = "transformer";  // a kind's name over another kind's keys
    gpt.src_vocab = gpt.tgt_vocab = 8;
    CHECK_THROWS_WITH(gpt.validate(), Contains("holds a \"gpt\" model's"));

    ModelConfig config = model_kind("transformer").defaults();
    config.src_vocab = config.tgt_vocab = 8;
    config.keys<TransformerKeys>().d_model = 16;
    config.update_from_json(R"({"model": "seq2seq", "hidden_size": 8})");
    CHECK(config.model == "seq2seq");
    CHECK(config.src_vocab == 8);
    CHECK(config.keys<Seq2SeqKeys>().hidden_size == 8);
    CHECK(config.keys<Seq2SeqKeys>().num_layers == 2);
    CHECK(config.keys<Seq2SeqKeys>().decoder == "init_state");
}
