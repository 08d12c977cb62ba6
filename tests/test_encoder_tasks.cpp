// An encoder's tasks (encoder_data.h): BERT's masking, the masked windows of a text and their
// evaluation, rows of labelled texts, balanced sampling, training a classifier and a masked
// language model end to end with exact resume, and starting a classifier from a masked language
// model (init_from), with the refusals of each.
#include "helpers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "seqgrad/core/ops.h"
#include "seqgrad/core/packed.h"
#include "seqgrad/inference/text_classifier.h"
#include "seqgrad/models/bert.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"
#include "seqgrad/training/encoder_data.h"

using namespace seqgrad;
using namespace seqgrad::models;
using namespace seqgrad::training;
using Catch::Matchers::Contains;
using seqgrad::testing::error_of;
using seqgrad::testing::rhymes;
using seqgrad::testing::TempDir;
using seqgrad::testing::ThreadCountScope;
namespace fs = std::filesystem;

namespace {

const TempDir& root() {
    static const TempDir dir("encoder_tasks");
    return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
    const fs::path path = root().path / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

// `values` followed by the gradients a backward pass left on the model's parameters, in their
// order; parameters without one (a head the loss did not use) are left out.
std::vector<float> with_gradients(std::vector<float> values, const nn::Module& model) {
    for (const auto& [name, p] : model.named_parameters())
        if (p.grad().defined())
            for (float g : p.grad().to_vector()) values.push_back(g);
    return values;
}

// A BERT as small as a test needs.
ModelConfig tiny_bert(int64_t max_seq_len = 24) {
    ModelConfig c = model_kind("bert").defaults();
    BertKeys& k = c.keys<BertKeys>();
    k.d_model = 16;
    k.n_heads = 2;
    k.n_layers = 1;
    k.d_ff = 32;
    k.max_seq_len = max_seq_len;
    c.dropout = 0;
    return c;
}

// Labelled texts whose label a word gives away: "yes" texts hold one of the first three words,
// "no" texts one of the last three, among filler words. `skew` "no" texts for each "yes" one.
std::string labelled(int64_t n, uint64_t seed, int64_t skew = 1) {
    const char* filler[] = {"the", "a", "it", "was", "and", "of"};
    const char* yes[] = {"good", "fine", "nice"};
    const char* no[] = {"bad", "poor", "sad"};
    Generator gen(seed);
    std::string text;
    for (int64_t i = 0; i < n; ++i) {
        const bool is_yes = i % (skew + 1) == 0;
        std::string line;
        for (int w = 0; w < 3; ++w) line += std::string(filler[gen.below(6)]) + " ";
        line += is_yes ? yes[gen.below(3)] : no[gen.below(3)];
        text += line + "\t" + (is_yes ? "yes" : "no") + "\n";
    }
    return text;
}

// The BERT's recipe for `task` on characters (its SentencePiece needs more text than a test has),
// with a quick warm-up, a high rate and an evaluation every 20 steps; the caller gives the data.
TrainingOptions encoder_options(const std::string& task, int64_t rows) {
    TrainingOptions o = recipe("bert").training;
    o.task = task;
    o.tokens = "char";
    o.batches.max_sentences = rows;
    o.warmup_steps = 5;
    o.lr = 3e-3;
    o.min_lr = 3e-4;
    o.eval_every_steps = 20;
    o.log_every = 1000;
    return o;
}

TrainingOptions classify_options(const std::string& tag) {
    TrainingOptions o = encoder_options("classify", 16);
    o.train_files = {write_file(tag + "-train.tsv", labelled(240, 1))};
    o.dev_files = {write_file(tag + "-dev.tsv", labelled(60, 2))};
    return o;
}

TrainingOptions mlm_options() {
    TrainingOptions o = encoder_options("mlm", 8);
    o.text = write_file("rhymes.txt", rhymes());
    return o;
}

struct Log {
    std::vector<double> losses;
    std::vector<EvalResult> evaluations;
    std::vector<std::string> data;
    void operator()(const TrainingEvent& e) {
        if (e.kind == TrainingEvent::Kind::step) losses.push_back(e.loss);
        if (e.kind == TrainingEvent::Kind::evaluation) evaluations.push_back(e.eval);
        if (e.kind == TrainingEvent::Kind::data) data.push_back(e.text);
    }
};

std::map<std::string, std::vector<float>> weights_of(const std::string& file) {
    std::map<std::string, std::vector<float>> all;
    for (const auto& [name, t] : text::load_model(file).model->state_dict()) all[name] = t.to_vector();
    return all;
}

int64_t at(const IntTensor& t, int64_t row, int64_t column) { return t.data()[row * t.size(1) + column]; }

}  // namespace

// ---- masking ----

TEST_CASE("BERT's masking: 15% of the positions, 80% <mask>, 10% random, 10% unchanged", "[encoder]") {
    Generator gen(3);
    const int64_t vocab = 40, n = 200000;
    std::vector<int64_t> row(n), labels(n);
    for (int64_t i = 0; i < n; ++i)
        row[static_cast<size_t>(i)] = kFirstEncoderSymbol + i % (vocab - kFirstEncoderSymbol);
    const std::vector<int64_t> original = row;
    mask_tokens(row, labels, 0.15, vocab, gen);
    int64_t chosen = 0, masked = 0, unchanged = 0, random = 0;
    for (size_t i = 0; i < row.size(); ++i) {
        if (labels[i] == kPad) {
            CHECK(row[i] == original[i]);  // a position not chosen keeps its token
            continue;
        }
        ++chosen;
        CHECK(labels[i] == original[i]);  // the label is the true token
        if (row[i] == kMask) ++masked;
        else if (row[i] == original[i]) ++unchanged;
        else {
            ++random;
            CHECK(row[i] >= kFirstEncoderSymbol);  // a symbol of the data's, never a special token
            CHECK(row[i] < vocab);
        }
    }
    const auto share = [](int64_t part, int64_t whole) {
        return static_cast<double>(part) / static_cast<double>(whole);
    };
    CHECK(share(chosen, n) == Approx(0.15).margin(0.005));
    CHECK(share(masked, chosen) == Approx(0.8).margin(0.01));
    // A random draw may give the token itself back (1 in 33 here), as in BERT.
    CHECK(share(unchanged, chosen) == Approx(0.1 + 0.1 / 33).margin(0.01));
    CHECK(share(random, chosen) == Approx(0.1 - 0.1 / 33).margin(0.01));
}

TEST_CASE("a row where no position was drawn still gets one mask", "[encoder]") {
    for (uint64_t seed = 0; seed < 50; ++seed) {
        Generator gen(seed);
        std::vector<int64_t> row = {10, 11}, labels(2, kPad);
        mask_tokens(row, labels, 0.01, 20, gen);
        CHECK(std::count_if(labels.begin(), labels.end(), [](int64_t l) { return l != kPad; }) >= 1);
    }
}

TEST_CASE("masked windows: <cls> text <sep>, labels at the masked positions, drawn from the seed alone", "[encoder]") {
    std::vector<int32_t> text(500);
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(kFirstEncoderSymbol + i % 13);
    MaskedWindowStream stream(text, 12, 4, 20, 0.15, 9);
    CHECK(stream.batches_in_epoch() == 13);  // 500 tokens, 4 windows of 10 a batch
    std::vector<Batch> batches;
    for (int i = 0; i < 5; ++i) batches.push_back(stream.next());
    for (const Batch& b : batches) {
        REQUIRE(b.src.shape() == Shape{4, 12});
        REQUIRE(b.labels.shape() == Shape{4, 12});
        int64_t labelled = 0;
        for (int64_t r = 0; r < 4; ++r) {
            CHECK(at(b.src, r, 0) == kCls);
            CHECK(at(b.src, r, 11) == kSep);
            CHECK(at(b.labels, r, 0) == kPad);
            CHECK(at(b.labels, r, 11) == kPad);
            for (int64_t t = 1; t < 11; ++t) {
                const int64_t label = at(b.labels, r, t);
                if (label == kPad) continue;
                ++labelled;
                // The label is the text's token at that place in the window.
                const int64_t start = b.example_index[static_cast<size_t>(r)];
                CHECK(label == text[static_cast<size_t>(start + t - 1)]);
            }
        }
        CHECK(b.target_tokens == labelled);
    }
    // Restored at batch 3, a new stream hands out batch 3 and 4 again, masks and all.
    MaskedWindowStream again(text, 12, 4, 20, 0.15, 9);
    again.restore({0, 3});
    for (int i = 3; i < 5; ++i) {
        const Batch b = again.next();
        CHECK(b.src.to_vector() == batches[static_cast<size_t>(i)].src.to_vector());
        CHECK(b.labels.to_vector() == batches[static_cast<size_t>(i)].labels.to_vector());
    }
    CHECK_THROWS_WITH(again.restore({0, 13}), Contains("not one of its 13"));
}

TEST_CASE("the masked loss of a text scores the same masks every time, every token's window once", "[encoder]") {
    Generator init(1);
    ModelConfig c = tiny_bert(12);
    c.vocab = 20;
    c.keys<BertKeys>().n_classes = 0;
    auto model = make_model(c, init);
    model->eval();
    std::vector<int32_t> text(95);
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(kFirstEncoderSymbol + i % 13);
    const MaskedScores a = masked_text_loss(*model, text, 12, 3, 0.15, 5);
    const MaskedScores b = masked_text_loss(*model, text, 12, 3, 0.15, 5);
    CHECK(a.loss == b.loss);
    CHECK(a.masked == b.masked);
    // The rows per batch change nothing but the batching: the same windows, the same masks.
    const MaskedScores one_row = masked_text_loss(*model, text, 12, 1, 0.15, 5);
    CHECK(one_row.masked == a.masked);
    CHECK(one_row.loss == Approx(a.loss).epsilon(1e-5));
    CHECK(a.masked >= 10);  // 10 windows, each with a mask at least
    CHECK(std::isfinite(a.loss));
    CHECK(a.accuracy >= 0);
    CHECK(a.accuracy <= 100);
    const MaskedScores other = masked_text_loss(*model, text, 12, 3, 0.15, 6);
    CHECK(other.loss != a.loss);  // another seed, other masks
}

// ---- rows ----

TEST_CASE("an encoder's rows: <cls> a <sep> b <sep>, cut longest first, segments after the first <sep>", "[encoder]") {
    const std::vector<int64_t> a = {10, 11, 12, 13, 14, 15}, b = {20, 21};
    bool cut = true;
    CHECK(text::encoder_row(a, std::nullopt, 0, &cut) == std::vector<int64_t>{kCls, 10, 11, 12, 13, 14, 15, kSep});
    CHECK(!cut);
    CHECK(text::encoder_row(a, std::nullopt, 5, &cut) == std::vector<int64_t>{kCls, 10, 11, 12, kSep});
    CHECK(cut);
    // The pair's longer text loses tokens until the two are as long, then they take turns.
    CHECK(text::encoder_row(a, std::span<const int64_t>(b), 9, &cut) ==
          std::vector<int64_t>{kCls, 10, 11, 12, 13, kSep, 20, 21, kSep});
    CHECK(text::encoder_row(a, std::span<const int64_t>(b), 7, &cut) ==
          std::vector<int64_t>{kCls, 10, 11, kSep, 20, 21, kSep});
    CHECK(text::encoder_row(a, std::span<const int64_t>(b), 6, &cut) ==
          std::vector<int64_t>{kCls, 10, 11, kSep, 20, kSep});
    CHECK_THROWS_WITH(text::encoder_row(a, std::span<const int64_t>(b), 4), Contains("no room"));

    const IntTensor rows = text::encoder_batch({{kCls, 10, kSep, 20, 21, kSep}, {kCls, 10, 11, kSep}});
    CHECK(rows.shape() == Shape{2, 6});
    CHECK(encoder_segments(rows).to_vector() == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("an encoder's vocabulary has <cls>, <sep> and <mask> after the four, and refuses them as data", "[encoder]") {
    const text::Vocabulary v = text::Vocabulary::from_symbols({"b", "a"}, /*encoder=*/true);
    CHECK(v.for_encoder());
    CHECK(v.symbol(kCls) == "<cls>");
    CHECK(v.symbol(kSep) == "<sep>");
    CHECK(v.symbol(kMask) == "<mask>");
    CHECK(v.id("a") == kFirstEncoderSymbol);
    CHECK(text::Vocabulary::from_json(v.to_json()) == v);
    CHECK(text::Vocabulary::from_json(v.to_json()).for_encoder());
    CHECK(!text::Vocabulary::from_symbols({"a"}).for_encoder());
    CHECK_THROWS_WITH(text::Vocabulary::from_symbols({"a", "<mask>"}, true), Contains("special token <mask>"));
    // A language model's vocabulary may hold the word, as any other.
    CHECK(text::Vocabulary::from_symbols({"<mask>"}).contains("<mask>"));
    int64_t masks = 0;
    const text::Tokenizer chars = text::Tokenizer::characters();
    CHECK(text::encoder_ids_with_masks("a<mask>b<mask>", chars, v, &masks) ==
          std::vector<int64_t>{v.id("a"), kMask, v.id("b"), kMask});
    CHECK(masks == 2);
}

// ---- classify ----

TEST_CASE("balanced sampling draws each class about equally, the plain order each text once an epoch", "[encoder]") {
    TrainingOptions o = classify_options("balance");
    o.train_files = {write_file("skewed.tsv", labelled(400, 3, /*skew=*/9))};  // 40 yes, 360 no
    ClassifyData data = prepare_classify(o, DataRequest{});
    const auto count_yes = [&](BatchSource& stream) {
        int64_t yes = 0, rows = 0;
        const int32_t yes_id = 1;  // labels sorted: no, yes
        for (int64_t b = 0; b < stream.batches_in_epoch(); ++b) {
            const Batch batch = stream.next();
            for (int64_t i = 0; i < batch.labels.numel(); ++i) yes += batch.labels.data()[i] == yes_id ? 1 : 0;
            rows += batch.labels.numel();
        }
        return std::pair{yes, rows};
    };
    ClassifyData plain = prepare_classify(o, DataRequest{});
    const int64_t texts = plain.train.size();
    const auto [plain_yes, plain_rows] = count_yes(*plain.batches(o, 0));
    CHECK(plain_rows == texts);
    CHECK(plain_yes == texts / 10);
    data.balance = "sample";
    const auto [balanced_yes, balanced_rows] = count_yes(*data.batches(o, 0));
    CHECK(balanced_rows == texts);
    CHECK(static_cast<double>(balanced_yes) / static_cast<double>(balanced_rows) == Approx(0.5).margin(0.08));
}

TEST_CASE("a BERT learns to classify, keeps its labels in the checkpoint and resumes exactly", "[encoder][training]") {
    TrainingOptions o = classify_options("learn");
    o.max_steps = 200;
    o.decay_steps = 200;
    const std::string whole = root().fresh("classify-whole"), parts = root().fresh("classify-parts");
    Log log;
    const TrainingResult r = train(tiny_bert(), o, whole, std::ref(log));
    REQUIRE(r.has_best);
    const auto& best = std::get<ClassifierScores>(r.best_dev);
    INFO("best dev accuracy " << best.accuracy);
    CHECK(best.accuracy >= 95);
    CHECK(best.texts == 60);
    const text::LoadedModel loaded = text::load_model(whole);
    CHECK(loaded.labels == std::vector<std::string>{"no", "yes"});
    CHECK(dynamic_cast<EncoderModel&>(*loaded.model).classes() == 2);
    CHECK(loaded.target_vocab.for_encoder());

    // From C++ in each precision: float32 as trained, int8 packed, the same labels.
    const std::vector<std::string> texts = {"the it was good", "a of the bad", "it and nice", "was the poor"};
    const inference::TextClassifier plain(text::load_model(whole));
    CHECK(!plain.checkpoint().model->weights_packed());
    const auto labels = plain.classify(texts);
    CHECK(labels[0][0].label == "yes");
    CHECK(labels[1][0].label == "no");
    if (packing_available(Precision::int8)) {
        const inference::TextClassifier quantized(text::load_model(whole), Precision::int8);
        REQUIRE(quantized.checkpoint().model->weights_packed());
        CHECK(quantized.checkpoint().model->packed_precision() == Precision::int8);
        const auto int8_labels = quantized.classify(texts);
        for (size_t i = 0; i < texts.size(); ++i) {
            CHECK(int8_labels[i][0].label == labels[i][0].label);
            CHECK(std::fabs(int8_labels[i][0].probability - labels[i][0].probability) < 0.05f);
        }
    }

    o.max_steps = 87;
    Log first, second;
    train(tiny_bert(), o, parts, std::ref(first));
    resume(parts, 0, 0, 200, std::ref(second));
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), second.losses.begin(), second.losses.end());
    CHECK(joined == log.losses);
    CHECK(weights_of(parts + "/model.safetensors") == weights_of(whole + "/model.safetensors"));
}

TEST_CASE("a masked language model lowers its masked loss, resumes exactly, and starts a classifier",
          "[encoder][training]") {
    TrainingOptions o = mlm_options();
    o.max_steps = 40;
    o.decay_steps = 40;
    const std::string whole = root().fresh("mlm-whole"), parts = root().fresh("mlm-parts");
    Log log;
    ModelConfig c = tiny_bert();
    c.dropout = 0.1f;  // dropout's masks are resumed too
    train(c, o, whole, std::ref(log));
    REQUIRE(log.evaluations.size() == 2);
    const auto& early = std::get<MaskedScores>(log.evaluations.front());
    const auto& late = std::get<MaskedScores>(log.evaluations.back());
    CHECK(early.masked == late.masked);  // the same masks each time
    CHECK(late.loss < early.loss);
    CHECK(late.loss < std::log(15.0));  // below a uniform guess over the text's symbols
    const text::LoadedModel mlm = text::load_model(whole + "/model.safetensors");
    CHECK(!dynamic_cast<EncoderModel&>(*mlm.model).classifies());  // no classifier trained for nothing
    CHECK(mlm.labels.empty());

    o.max_steps = 17;
    Log first, second;
    train(c, o, parts, std::ref(first));
    resume(parts, 0, 0, 40, std::ref(second));
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), second.losses.begin(), second.losses.end());
    CHECK(joined == log.losses);
    CHECK(weights_of(parts + "/model.safetensors") == weights_of(whole + "/model.safetensors"));

    SECTION("a classifier starts from it: the encoder's weights, its vocabulary, a new classifier") {
        TrainingOptions f = classify_options("init");
        f.init_from = whole;
        f.max_steps = 1;
        f.lr = 1e-30;  // one step that moves nothing visible
        f.min_lr = 0;
        f.weight_decay = 0;
        const std::string out = root().fresh("init");
        Log flog;
        ModelConfig other = tiny_bert();
        other.keys<BertKeys>().d_model = 32;  // the checkpoint's shape wins
        train(other, f, out, std::ref(flog));
        const text::LoadedModel tuned = text::load_model(out + "/model.safetensors");
        CHECK(tuned.target_vocab == mlm.target_vocab);
        CHECK(tuned.model->config().keys<BertKeys>().d_model == 16);
        const auto before = weights_of(whole + "/model.safetensors"), after = weights_of(out + "/model.safetensors");
        for (const auto& [name, values] : before) {
            INFO(name);
            REQUIRE(after.count(name));
            for (size_t i = 0; i < values.size(); ++i) CHECK(after.at(name)[i] == Approx(values[i]).margin(1e-6));
        }
        CHECK(after.count("classifier.weight"));
        CHECK(!before.count("classifier.weight"));
        bool said = false;
        for (const std::string& line : flog.data)
            said = said || line.find("new: classifier.weight") != std::string::npos;
        CHECK(said);
    }
}

TEST_CASE("an encoder's tasks refuse what they cannot run, and write nothing", "[encoder][errors]") {
    TrainingOptions o = classify_options("refuse");
    o.max_steps = 2;
    const std::string out = (root().path / "refused").string();
    SECTION("classify with a GPT") {
        CHECK_THROWS_WITH(train(testing::tiny_gpt(), o, out),
                          Contains("the task \"classify\" trains an encoder (bert), not \"gpt\""));
    }
    SECTION("a BERT on a text task") {
        TrainingOptions t = mlm_options();
        t.task = "text";
        t.max_steps = 2;
        CHECK_THROWS_WITH(train(tiny_bert(), t, out), Contains("trains a language model (gpt), not \"bert\""));
    }
    SECTION("a label only dev has") {
        o.dev_files = {write_file("dev-new-label.tsv", "good day\tyes\nbad day\tmaybe\n")};
        CHECK_THROWS_WITH(train(tiny_bert(), o, out), Contains("dev-new-label.tsv:2") && Contains("maybe"));
    }
    SECTION("a line of the wrong fields") {
        o.train_files = {write_file("fields.tsv", "good day\tyes\nbad\tday\tno\n")};
        CHECK_THROWS_WITH(train(tiny_bert(), o, out), Contains("fields.tsv:2"));
    }
    SECTION("an empty text") {
        o.train_files = {write_file("empty-text.tsv", "good day\tyes\n\tno\n")};
        CHECK_THROWS_WITH(train(tiny_bert(), o, out), Contains("empty-text.tsv:2"));
    }
    SECTION("init_from a GPT's checkpoint") {
        const std::string gpt_dir = root().fresh("gpt");
        TrainingOptions g = testing::text_options(mlm_options().text);
        g.max_steps = 1;
        train(testing::tiny_gpt(), g, gpt_dir);
        o.init_from = gpt_dir;
        CHECK_THROWS_WITH(train(tiny_bert(), o, out), Contains("holds a \"gpt\" model, not a \"bert\""));
    }
    SECTION("init_from an encoder that reads other tokens") {
        const std::string bytes = root().fresh("bytes");
        TrainingOptions m = mlm_options();
        m.tokens = "byte";
        m.max_steps = 1;
        train(tiny_bert(), m, bytes);
        o.init_from = bytes;
        CHECK_THROWS_WITH(train(tiny_bert(), o, out),
                          Contains("reads texts as \"byte\" tokens") && Contains("asks for \"char\""));
    }
    SECTION("init_from with the mlm task") {
        TrainingOptions m = mlm_options();
        m.init_from = "x";
        m.max_steps = 1;
        CHECK_THROWS_WITH(train(tiny_bert(), m, out), Contains("the mlm task starts anew"));
    }
    CHECK(!fs::exists(out));
}

TEST_CASE("the evaluations of an encoder's tasks are written and read back by their keys", "[encoder]") {
    Progress p;
    p.best_dev = MaskedScores{.loss = 2.5, .accuracy = 41.0, .masked = 300};
    p.last_dev = ClassifierScores{.accuracy = 97.5, .macro_f1 = 96.0, .texts = 80};
    const Progress back = Progress::from_json(p.to_json());
    CHECK(std::get<MaskedScores>(back.best_dev).masked == 300);
    CHECK(std::get<MaskedScores>(back.best_dev).loss == 2.5);
    CHECK(std::get<ClassifierScores>(back.last_dev).macro_f1 == 96.0);
    CHECK(std::get<ClassifierScores>(back.last_dev).texts == 80);
}

TEST_CASE("the MLM loss runs the head at the labelled positions only, with the loss and gradients of all",
          "[encoder]") {
    Generator init(4);
    ModelConfig c = tiny_bert(12);
    c.vocab = 30;
    auto model = make_model(c, init);
    auto& encoder = dynamic_cast<EncoderModel&>(*model);
    model->eval();
    const IntTensor tokens = IntTensor::from_vector({4, 9, 10, 11, 12, 5, 4, 13, 14, 5, 0, 0}, {2, 6});
    const IntTensor labels = IntTensor::from_vector({0, 20, 0, 0, 21, 0, 0, 0, 22, 0, 0, 0}, {2, 6});
    const auto gradients = [&](bool selected) {
        model->zero_grad();
        const Tensor hidden = encoder.forward(tokens);
        const Tensor loss = selected ? encoder.mlm_loss(hidden, labels)
                                     : cross_entropy(encoder.mlm_logits(hidden), labels, kPad);
        loss.backward();
        return with_gradients({loss.item()}, *model);  // the classifier's have none
    };
    const std::vector<float> selected = gradients(true), every = gradients(false);
    REQUIRE(selected.size() == every.size());
    for (size_t i = 0; i < every.size(); ++i) CHECK(selected[i] == Approx(every[i]).margin(1e-6));
    model->zero_grad();
    const Tensor none = encoder.mlm_loss(encoder.forward(tokens), IntTensor::zeros({2, 6}));
    CHECK(none.item() == 0.0f);
    CHECK_THROWS_WITH(encoder.mlm_loss(encoder.forward(tokens), IntTensor::zeros({2, 5})),
                      Contains("labels must be [B, T]"));
}

TEST_CASE("forward_first is forward's first position, with its gradients, the last layer run for it alone",
          "[encoder]") {
    // Post-LN with learned positions and Pre-LN with rotary ones (Pre-LN normalises the keys and
    // values apart from the query, and adds a final norm), each with padding and a pair's segments.
    for (const auto& [norm, positional] : {std::pair{"post", "learned"}, std::pair{"pre", "rope"}}) {
        CAPTURE(norm, positional);
        Generator init(6);
        ModelConfig c = tiny_bert(12);
        c.vocab = 30;
        c.keys<BertKeys>().n_layers = 2;
        c.keys<BertKeys>().norm = norm;
        c.keys<BertKeys>().positional = positional;
        c.keys<BertKeys>().n_classes = 3;
        auto model = make_model(c, init);
        auto& encoder = dynamic_cast<EncoderModel&>(*model);
        model->eval();
        const IntTensor tokens = IntTensor::from_vector({4, 9, 10, 5, 12, 5, 4, 13, 14, 5, 0, 0}, {2, 6});
        const IntTensor segments = encoder_segments(tokens);
        const IntTensor labels = IntTensor::from_vector({2, 0}, {2});
        const auto run = [&](bool first_only) {
            model->zero_grad();
            const Tensor hidden = first_only ? encoder.forward_first(tokens, segments)
                                             : encoder.forward(tokens, segments);
            const Tensor first = first_only ? hidden : slice(hidden, 1, 0, 1);
            REQUIRE(first.shape() == Shape{2, 1, 16});
            encoder.class_loss(hidden, labels).backward();
            return with_gradients(first.to_vector(), *model);  // the MLM head's have none
        };
        const std::vector<float> trimmed = run(true), whole = run(false);
        REQUIRE(trimmed.size() == whole.size());
        for (size_t i = 0; i < whole.size(); ++i) CHECK(trimmed[i] == Approx(whole[i]).margin(2e-6));
    }
}

TEST_CASE("many texts without a gradient run a slice per thread in pieces, with each text's values alone",
          "[encoder][threads]") {
    Generator init(8);
    ModelConfig c = tiny_bert(40);
    c.vocab = 50;
    c.keys<BertKeys>().n_layers = 2;
    c.keys<BertKeys>().n_classes = 3;
    auto model = make_model(c, init);
    auto& encoder = dynamic_cast<EncoderModel&>(*model);
    model->eval();
    // 37 pairs of texts in 40 tokens, the later ones padded more and more, each pair's second text
    // starting elsewhere: slices of 19 and 18 on two threads (split_batch_pays), no two alike.
    constexpr int64_t batch = 37, length = 40;
    std::vector<int64_t> ids;
    Generator draw(3);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < length; ++t)
            ids.push_back(t == 0                ? 4
                          : t >= length - b / 2 ? 0
                          : t == 5 + b % 11     ? 5  // <sep>: the second text's segment starts after it
                                                : 6 + static_cast<int64_t>(draw.next_u64() % 44));
    const IntTensor tokens = IntTensor::from_vector(ids, {batch, length});
    const IntTensor segments = encoder_segments(tokens);
    const auto run = [&](int threads, bool first_only) {
        const ThreadCountScope scope(threads);
        const NoGradGuard no_grad;
        return first_only ? encoder.forward_first(tokens, segments) : encoder.forward(tokens, segments);
    };
    // Each text alone (40 tokens: too few to split), the texts' results one after another.
    const auto one_by_one = [&](bool first_only) {
        const NoGradGuard no_grad;
        std::vector<float> values;
        for (int64_t b = 0; b < batch; ++b) {
            const IntTensor t = select_rows(tokens, {b}), s = select_rows(segments, {b});
            const Tensor hidden = first_only ? encoder.forward_first(t, s) : encoder.forward(t, s);
            const std::vector<float> v = hidden.to_vector();
            values.insert(values.end(), v.begin(), v.end());
        }
        return values;
    };
    for (const char* precision : {"float32", "int8"}) {
        CAPTURE(precision);
        if (std::string(precision) == "int8") model->pack_weights(Precision::int8);
        {
            const ThreadCountScope restore;
            const NoGradGuard no_grad;
            for (const int threads : {1, 2}) {
                set_num_threads(threads);
                CHECK(split_batch_pays(*model, batch, batch * length));
            }
        }
        // Pieces of 6 texts (piece_sequences(40)): 6 x 6 and 1 on one thread; 6, 6, 6, 1 and
        // 6, 6, 6 on two.
        REQUIRE(piece_sequences(length) == 6);
        for (const bool first_only : {true, false}) {
            CAPTURE(first_only);
            const std::vector<float> b = one_by_one(first_only);
            for (const int threads : {1, 2}) {
                CAPTURE(threads);
                const Tensor split = run(threads, first_only);
                REQUIRE(split.shape() == Shape{batch, first_only ? 1 : length, 16});
                // The same values: int8's sums are exact integers, float32's products may round a
                // few ulps apart with the rows in one call (OpenBLAS's Haswell kernels: 5e-7 at most
                // here).
                const std::vector<float> a = split.to_vector();
                if (std::string(precision) == "int8") CHECK(a == b);
                for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(2e-6));
            }
        }
    }
    // Nothing is split where something records, draws or must see each operation.
    model->train();
    {
        const NoGradGuard no_grad;
        CHECK_FALSE(split_batch_pays(*model, batch, batch * length));
    }
    model->eval();
    CHECK_FALSE(split_batch_pays(*model, batch, batch * length));  // the gradient is on
}

TEST_CASE("split_batch joins its slices in order and throws a slice's error", "[encoder][threads]") {
    const ThreadCountScope scope(2);
    const auto rows = [](int64_t begin, int64_t end) {
        std::vector<float> v;
        for (int64_t i = begin; i < end; ++i) v.insert(v.end(), {static_cast<float>(i), -static_cast<float>(i)});
        return Tensor::from_vector(v, {end - begin, 2});
    };
    const Tensor joined = split_batch(5, rows);
    CHECK(joined.shape() == Shape{5, 2});
    CHECK(joined.to_vector() == std::vector<float>{0, 0, 1, -1, 2, -2, 3, -3, 4, -4});
    // Slices [0, 2) and [2, 5), taken in pieces of at most two sequences.
    std::mutex mutex;
    std::vector<std::pair<int64_t, int64_t>> pieces;
    const auto recorded = [&](int64_t begin, int64_t end) {
        const std::lock_guard<std::mutex> lock(mutex);
        pieces.emplace_back(begin, end);
        return rows(begin, end);
    };
    const Tensor in_pieces = split_batch(5, recorded, 2);
    CHECK(in_pieces.to_vector() == joined.to_vector());
    std::sort(pieces.begin(), pieces.end());
    CHECK(pieces == std::vector<std::pair<int64_t, int64_t>>{{0, 2}, {2, 4}, {4, 5}});
    CHECK_THAT(error_of([&] { split_batch(5, rows, 0); }), Contains("pieces of 0 sequences"));
    CHECK_THAT(error_of([&] {
                   split_batch(6, [&](int64_t begin, int64_t end) {
                       check(begin == 0, "a slice", "refused rows ", begin, " to ", end);
                       return rows(begin, end);
                   });
               }),
               Contains("refused rows 3 to 6"));
    CHECK_THAT(error_of([&] { split_batch(6, [&](int64_t begin, int64_t) { return rows(begin, begin + 1); }); }),
               Contains("a slice of 3 rows gave [1, 2]"));
}
