// A language model's data and training (text_data.h, the "text" task): the split and its report,
// the training windows, the loss over a whole text, exact resume, gradient accumulation against
// one large batch, and generation from a checkpoint (TextGenerator): greedy and seeded sampling
// repeat, the window slides past the context, and bad requests are refused.
#include "helpers.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "seqgrad/core/hash.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/inference.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"

using namespace seqgrad;
using namespace seqgrad::models;
using namespace seqgrad::training;
using Catch::Matchers::Contains;
using seqgrad::testing::rhymes;
using seqgrad::testing::TempDir;
using seqgrad::testing::text_options;
using seqgrad::testing::tiny_gpt;
namespace fs = std::filesystem;

namespace {

const TempDir& root() {
    static const TempDir dir("text_data");
    return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
    const fs::path path = root().path / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

std::string fresh_dir(const std::string& name) { return root().fresh(name); }

const std::string& rhymes_path() {
    static const std::string path = write_file("rhymes.txt", rhymes());
    return path;
}

struct LossLog {
    std::vector<double> losses;
    std::vector<std::string> messages;
    void operator()(const TrainingEvent& e) {
        if (e.kind == TrainingEvent::Kind::step) losses.push_back(e.loss);
        if (e.kind == TrainingEvent::Kind::message) messages.push_back(e.text);
    }
};

std::vector<float> weights_of(const std::string& file) {
    text::LoadedModel m = text::load_model(file);
    std::vector<float> all;
    for (const auto& [name, t] : m.model->state_dict())
        for (float v : t.to_vector()) all.push_back(v);
    return all;
}

// A small GPT trained on rhymes.txt, shared by the generation tests.
const std::string& trained_checkpoint() {
    static const std::string dir = [] {
        const std::string out = fresh_dir("trained");
        TrainingOptions o = text_options(rhymes_path());
        o.max_steps = 150;
        o.eval_every_steps = 50;
        o.lr = 1e-2;
        ModelConfig c = tiny_gpt();
        c.dropout = 0;
        train(c, o, out);
        return out;
    }();
    return dir;
}

}  // namespace

// ---- the data ----

TEST_CASE("a text without a validation file splits 90/10 in order and reports both sizes", "[text]") {
    const std::string text = "abcdefghij\nklmnopqrst\nuvwxyzäöü\n";  // 32 characters, 35 bytes
    const TrainingOptions o = text_options(write_file("split.txt", text));
    DataRequest request;
    request.max_target_length = 4;
    const TextData data = prepare_text(o, request);
    // 90% of 32 characters is 28: the training text ends before the 29th character ("ö").
    CHECK(data.train_text.size() == 28);
    CHECK(data.dev_text.size() == 4);
    CHECK(data.dev_units == 4);
    CHECK(data.unit == "character");
    // ä, ö and ü are only in the validation text: unknown to the training text's vocabulary.
    const std::vector<int64_t> dev(data.dev_text.begin(), data.dev_text.end());
    CHECK(data.target_vocab.decode(dev) == std::vector<std::string>{"<unk>", "<unk>", "<unk>", "\n"});
    REQUIRE(data.report.size() == 2);
    CHECK_THAT(data.report[0], Contains("28 characters to train on, 4 to validate on (the last 10% of"));
    CHECK_THAT(data.report[1], Contains("28 training tokens, 4 validation tokens (3 unknown)"));

    TrainingOptions bytes = o;
    bytes.tokens = "byte";
    const TextData by_byte = prepare_text(bytes, request);
    CHECK(by_byte.train_text.size() == 31);  // 90% of 35 bytes
    CHECK(by_byte.dev_units == 4);
    CHECK(by_byte.unit == "byte");

    TrainingOptions with_val = o;
    with_val.val = write_file("val.txt", "cab\n");
    const TextData given = prepare_text(with_val, request);
    CHECK(given.train_text.size() == 32);
    CHECK(given.dev_text.size() == 4);
    CHECK_THAT(given.report[0], Contains("(" + with_val.val + ")"));
}

TEST_CASE("the validation split ends exactly where the training text does", "[text]") {
    const TrainingOptions o = text_options(rhymes_path());
    const TextData data = prepare_text(o, {});
    std::vector<int64_t> all(data.train_text.begin(), data.train_text.end());
    all.insert(all.end(), data.dev_text.begin(), data.dev_text.end());
    CHECK(data.target_tokenizer.detokenize(data.target_vocab.decode(all)) == rhymes());
    CHECK(static_cast<double>(data.dev_text.size()) == Approx(0.1 * static_cast<double>(all.size())).margin(1));
}

TEST_CASE("bad texts are refused with the file and the reason", "[text][errors]") {
    DataRequest request;
    request.max_target_length = 16;
    TrainingOptions o = text_options(write_file("empty.txt", ""));
    CHECK_THROWS_WITH(prepare_text(o, request), Contains("empty.txt: the text is empty"));
    o.text = write_file("short.txt", "to be or not\n");
    CHECK_THROWS_WITH(prepare_text(o, request), Contains("fewer than one window of 17"));
    o.text = write_file("latin1.txt", "caf\xe9 au lait\n");
    CHECK_THROWS_WITH(prepare_text(o, request), Contains("invalid UTF-8 at byte 3"));
    o.tokens = "byte";  // bytes read any text
    request.max_target_length = 4;
    CHECK(prepare_text(o, request).train_text.size() == 11);  // 90% of 13 bytes
    o.tokens = "char";
    o.text = (root().path / "missing.txt").string();
    CHECK_THROWS_WITH(prepare_text(o, request), Contains("missing.txt"));
}

TEST_CASE("training windows are drawn from the seed alone and restore mid-stream", "[text]") {
    std::vector<int32_t> text(500);
    std::iota(text.begin(), text.end(), 0);
    WindowStream a(text, 9, 4, 3), b(text, 9, 4, 3), other_seed(text, 9, 4, 4);
    CHECK(a.batches_in_epoch() == 16);  // 500 tokens / (4 windows x 8 predicted)
    std::vector<Batch> batches;
    for (int i = 0; i < 20; ++i) batches.push_back(a.next());
    for (const Batch& batch : batches) {
        REQUIRE(batch.tgt.shape() == Shape{4, 9});
        CHECK(batch.src.shape() == Shape{4, 0});
        CHECK(batch.target_tokens == 32);
        for (int64_t r = 0; r < 4; ++r)
            for (int64_t t = 0; t < 9; ++t) CHECK(batch.tgt.data()[r * 9 + t] == batch.tgt.data()[r * 9] + t);
    }
    CHECK(batches[0].tgt.to_vector() != batches[1].tgt.to_vector());
    CHECK(other_seed.next().tgt.to_vector() != batches[0].tgt.to_vector());
    b.restore(BatchStreamState{1, 1});  // epoch 1, batch 1: the 18th
    CHECK(b.next().tgt.to_vector() == batches[17].tgt.to_vector());
    // Starts cover the text to its last window.
    std::set<int64_t> starts;
    WindowStream many(text, 9, 64, 5);
    for (int i = 0; i < 50; ++i)
        for (int64_t s : many.next().example_index) starts.insert(s);
    CHECK(*starts.begin() == 0);
    CHECK(*starts.rbegin() == 500 - 9);
    CHECK_THROWS_WITH(WindowStream(std::vector<int32_t>(8), 9, 4, 1), Contains("holds no window of 9"));
}

TEST_CASE("the loss of a text covers every token but the first once, in any window and batch", "[text]") {
    Generator gen(1);
    ModelConfig c = tiny_gpt(8);
    c.vocab = 12;
    auto model = make_model(c, gen);
    model->eval();
    std::vector<int32_t> text(103);
    for (auto& id : text) id = 4 + static_cast<int32_t>(gen.below(8));
    // By hand: each token from position 1 on, predicted from at most the 7 before it in windows
    // of 8 that start at 0, 7, 14, ...
    double nats = 0;
    for (size_t start = 0; start + 1 < text.size(); start += 7) {
        const size_t length = std::min<size_t>(8, text.size() - start);
        std::vector<int64_t> window(text.begin() + static_cast<std::ptrdiff_t>(start),
                                    text.begin() + static_cast<std::ptrdiff_t>(start + length));
        const auto n = static_cast<int64_t>(length);
        nats += static_cast<double>(
                    model->loss(IntTensor::zeros({1, 0}), IntTensor::from_vector(window, {1, n}), 0).item()) *
                static_cast<double>(n - 1);
    }
    for (int64_t rows : {1, 3, 32}) {
        INFO("rows " << rows);
        const TextScores r = text_loss(*model, text, 8, rows, 103, "character");
        CHECK(r.tokens == 102);
        CHECK(r.loss == Approx(nats / 102).epsilon(1e-5));
        CHECK(r.perplexity() == Approx(std::exp(r.loss)));
        CHECK(r.bits_per_unit() == Approx(r.loss * 102 / std::log(2.0) / 103));
    }
}

// ---- training ----

TEST_CASE("an interrupted and resumed text run gives the same losses and weights as an uninterrupted one",
          "[text][training]") {
    TrainingOptions o = text_options(rhymes_path());
    o.max_steps = 24;
    o.decay_steps = 24;  // the cosine's length, the same in both parts
    o.accumulate = 2;
    const std::string whole = fresh_dir("whole"), parts = fresh_dir("parts");
    LossLog uninterrupted, first, second;
    train(tiny_gpt(), o, whole, std::ref(uninterrupted));
    o.max_steps = 13;
    CHECK(train(tiny_gpt(), o, parts, std::ref(first)).steps == 13);
    CHECK(resume(parts, 0, 0, 24, std::ref(second)).steps == 24);
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), second.losses.begin(), second.losses.end());
    REQUIRE(joined.size() == uninterrupted.losses.size());
    for (size_t i = 0; i < joined.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(joined[i] == uninterrupted.losses[i]);
    }
    CHECK(weights_of(parts + "/model.safetensors") == weights_of(whole + "/model.safetensors"));
}

// The rates of a run's steps, and a stop request after `stop_after` of them (0: none).
struct RateLog {
    std::vector<double> rates, losses;
    int64_t stop_after = 0;
    std::atomic<bool>* stop = nullptr;
    void operator()(const TrainingEvent& e) {
        if (e.kind != TrainingEvent::Kind::step) return;
        rates.push_back(e.learning_rate);
        losses.push_back(e.loss);
        if (stop && e.step == stop_after) *stop = true;
    }
};

TEST_CASE("a cosine given neither decay_steps nor max_steps runs over the epochs and resumes exactly",
          "[text][training]") {
    TrainingOptions o = text_options(rhymes_path());
    o.epochs = 2;
    o.warmup_steps = 3;
    const std::string whole = fresh_dir("cosine_whole"), parts = fresh_dir("cosine_parts");
    RateLog uninterrupted;
    train(tiny_gpt(), o, whole, std::ref(uninterrupted));
    const std::vector<double>& r = uninterrupted.rates;
    REQUIRE(r.size() >= 10);
    for (size_t i = 0; i < 3; ++i) CHECK(r[i] == Approx(o.lr * static_cast<double>(i + 1) / 4));  // the warm-up
    for (size_t i = 4; i < r.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(r[i] <= r[i - 1]);
        CHECK(r[i] < o.lr);
    }
    CHECK(r[r.size() / 2] > o.min_lr + 0.1 * (o.lr - o.min_lr));
    CHECK(r.back() == o.min_lr);  // at the end of the second epoch

    // Stopped halfway and resumed with the run's own budget: the same rates, losses and weights.
    std::atomic<bool> stop{false};
    RateLog first, second;
    first.stop_after = static_cast<int64_t>(r.size() / 2);
    first.stop = &stop;
    CHECK(train(tiny_gpt(), o, parts, std::ref(first), &stop).stop_reason == "interrupted");
    CHECK(resume(parts, 0, 0, 0, std::ref(second)).stop_reason == "budget");
    std::vector<double> rates = first.rates, losses = first.losses;
    rates.insert(rates.end(), second.rates.begin(), second.rates.end());
    losses.insert(losses.end(), second.losses.begin(), second.losses.end());
    CHECK(rates == uninterrupted.rates);
    CHECK(losses == uninterrupted.losses);
    CHECK(weights_of(parts + "/model.safetensors") == weights_of(whole + "/model.safetensors"));
}

TEST_CASE("a cosine given only minutes falls over the session's time", "[text][training]") {
    TrainingOptions o = text_options(rhymes_path());
    o.minutes = 0.01;  // 0.6 s: many steps of this model
    o.warmup_steps = 2;
    o.eval_every_steps = 0;
    RateLog log;
    train(tiny_gpt(), o, fresh_dir("cosine_minutes"), std::ref(log));
    const std::vector<double>& r = log.rates;
    REQUIRE(r.size() >= 4);
    for (size_t i = 3; i < r.size(); ++i) {
        INFO("step " << i + 1);
        CHECK(r[i] <= r[i - 1]);  // the clock only moves on
        CHECK(r[i] >= o.min_lr);
    }
    // The last step comes after at least half of the time: past the cosine's middle.
    CHECK(r.back() <= (o.lr + o.min_lr) / 2);
}

TEST_CASE("gradient accumulation over micro-batches equals one large batch", "[text][training]") {
    TrainingOptions o = text_options(rhymes_path());
    o.max_steps = 6;
    o.eval_every_steps = 0;
    o.clip_norm = 0.05;  // small enough to clip every step: the clip must see the whole batch's norm
    ModelConfig c = tiny_gpt();
    c.dropout = 0;  // dropout draws its masks in a different order over micro-batches
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<float>> weights;
    for (int64_t parts : {1, 3, 8}) {  // 3: micro-batches of 3, 3 and 2 windows
        o.accumulate = parts;
        const std::string dir = fresh_dir("accumulate" + std::to_string(parts));
        LossLog log;
        train(c, o, dir, std::ref(log));
        losses.push_back(log.losses);
        weights.push_back(weights_of(dir + "/model.safetensors"));
    }
    for (size_t k = 1; k < losses.size(); ++k) {
        INFO("accumulating " << (k == 1 ? 3 : 8) << " micro-batches");
        REQUIRE(losses[k].size() == losses[0].size());
        for (size_t i = 0; i < losses[0].size(); ++i) CHECK(losses[k][i] == Approx(losses[0][i]).epsilon(1e-5));
        CHECK(testing::max_abs_diff(Tensor::from_vector(weights[k], {static_cast<int64_t>(weights[k].size())}),
                                    Tensor::from_vector(weights[0], {static_cast<int64_t>(weights[0].size())})) <
              2e-5f);
    }
}

TEST_CASE("a GPT learns a text: its validation loss falls far below the untrained model's", "[text][training]") {
    const TrainingState state = load_training_state(CheckpointDir(trained_checkpoint()).training_file());
    REQUIRE(state.progress.has_best);
    const double best = std::get<TextScores>(state.progress.best_dev).loss;
    const double uniform = std::log(static_cast<double>(text::load_model(trained_checkpoint()).target_vocab.size()));
    INFO("best validation loss " << best << ", a uniform guess's " << uniform);
    CHECK(best < 1.5);  // below what letter frequencies alone give (about 2.6): it has learned words
}

// ---- generation ----

namespace {

// The continuation recomputed from scratch at every token (no cache): each token chosen from the
// logits of the whole window before it, the window sliding as TextGenerator's does (when it would
// pass `window` tokens it starts again from the last window / 2 of the text, a new segment) and
// each segment sampling with its own seed, the first `seed`, segment s splitmix64_mix(seed + s).
std::string by_recomputing(const std::string& checkpoint, const std::string& prompt, int64_t count, int64_t window,
                           const DecodingOptions& decoding) {
    text::LoadedModel m = text::load_model(checkpoint);
    m.model->eval();
    NoGradGuard no_grad;
    std::vector<int64_t> all;
    for (const std::string& s : m.target_tokenizer.tokenize(prompt)) all.push_back(m.target_vocab.id(s));
    std::vector<int64_t> input(all.end() - std::min<int64_t>(window, static_cast<int64_t>(all.size())), all.end());
    std::vector<std::string> symbols;
    uint64_t segment = 0;
    auto sampler = make_sampler(decoding);
    for (int64_t i = 0; i < count; ++i) {
        const auto n = static_cast<int64_t>(input.size());
        const Tensor logits = m.model->logits(IntTensor::zeros({1, 0}), IntTensor::from_vector(input, {1, n}));
        const int64_t vocab = logits.size(2);
        const Tensor last = reshape(slice(logits, 1, n - 1, n), {1, vocab});
        // A text has no end, nor <pad> or <s>.
        const int64_t token = sampler->choose(last, std::vector<int64_t>{kEos, kPad, kSos}).indices.data()[0];
        all.push_back(token);
        input.push_back(token);
        symbols.push_back(m.target_vocab.symbol(token));
        if (static_cast<int64_t>(input.size()) > window) {
            input.assign(all.end() - window / 2, all.end());
            DecodingOptions next = decoding;
            next.seed = splitmix64_mix(decoding.seed + ++segment);
            sampler = make_sampler(next);
        }
    }
    return m.target_tokenizer.detokenize(symbols);
}

}  // namespace

TEST_CASE("generation through the cache writes the text that recomputing every window does", "[text][generate]") {
    for (const float temperature : {0.0f, 1.0f})
        for (int64_t window : {16, 6}) {  // the model's context, and a shorter window of one's own
            INFO("temperature " << temperature << ", window " << window);
            const inference::TextGenerator generator(trained_checkpoint());
            REQUIRE(generator.context() == 16);
            inference::GenerationOptions options;
            options.context = window == 16 ? 0 : window;
            options.max_tokens = 40;  // past the window: it slides
            options.decoding.temperature = temperature;
            options.decoding.seed = 21;
            std::string streamed;
            const inference::Generation g =
                generator.generate("the cat", options, [&](const std::string& piece) { streamed += piece; });
            CHECK(g.tokens == 40);
            CHECK(g.prompt_tokens == 7);
            CHECK(g.text == streamed);
            CHECK(g.text == by_recomputing(trained_checkpoint(), "the cat", 40, window, options.decoding));
            CHECK(generator.generate("the cat", options).text == g.text);
        }
}

TEST_CASE("sampling repeats for a seed and differs between seeds", "[text][generate]") {
    const inference::TextGenerator generator(trained_checkpoint());
    inference::GenerationOptions options;
    options.max_tokens = 60;
    options.decoding.temperature = 1.5f;
    options.decoding.seed = 3;
    const std::string a = generator.generate("\n", options).text;
    CHECK(generator.generate("\n", options).text == a);
    options.decoding.seed = 4;
    CHECK(generator.generate("\n", options).text != a);
    options.decoding.top_k = 1;  // top-k 1 is greedy whatever the seed
    options.decoding.seed = 5;
    const std::string top1 = generator.generate("\n", options).text;
    options.decoding.temperature = 0;
    CHECK(generator.generate("\n", options).text == top1);
}

TEST_CASE("a language model never writes <pad>, <s> or </s>, even untrained and sampled hot", "[text][generate]") {
    // One step from its initialisation, at temperature 50: every symbol nearly equally likely.
    const std::string dir = fresh_dir("untrained");
    TrainingOptions o = text_options(rhymes_path());
    o.max_steps = 1;
    train(tiny_gpt(), o, dir);
    const inference::TextGenerator generator(dir);
    inference::GenerationOptions options;
    options.max_tokens = 3000;
    options.decoding.temperature = 50;
    const inference::Generation g = generator.generate("the", options);
    REQUIRE(g.tokens == 3000);
    for (const char* special : {"<pad>", "<s>", "</s>"}) {
        INFO(special);
        CHECK(g.text.find(special) == std::string::npos);
    }
    // It writes everything else the vocabulary holds (<unk> included): the bar is all that held
    // those three back.
    const text::LoadedModel m = text::load_model(dir);
    std::set<std::string> written;
    for (const std::string& symbol : m.target_tokenizer.tokenize(g.text)) written.insert(symbol);
    CHECK(g.text.find("<unk>") != std::string::npos);
    CHECK(written.size() + 4 >= static_cast<size_t>(m.target_vocab.size()));
}

TEST_CASE("bad generation requests are refused", "[text][generate][errors]") {
    const inference::TextGenerator generator(trained_checkpoint());
    inference::GenerationOptions options;
    options.decoding.temperature = -0.5f;
    CHECK_THROWS_WITH(generator.generate("the", options), Contains("\"temperature\" must be 0 or more"));
    options.decoding.temperature = 1;
    for (float p : {0.0f, 1.5f}) {
        options.decoding.top_p = p;
        CHECK_THROWS_WITH(generator.generate("the", options), Contains("\"top_p\" must be in (0, 1]"));
    }
    options.decoding.top_p = 1;
    options.decoding.top_k = -1;
    CHECK_THROWS_WITH(generator.generate("the", options), Contains("\"top_k\" must be 0 or more"));
    options.decoding.top_k = 0;
    options.context = 17;
    CHECK_THROWS_WITH(generator.generate("the", options), Contains("above the model's, 16"));
    options.context = 0;
    CHECK_THROWS_WITH(generator.generate("", options), Contains("the prompt is empty"));
    CHECK_THROWS_WITH(generator.generate("caf\xe9", options), Contains("not valid UTF-8"));
    options.max_tokens = 3;
    CHECK(generator.generate("THE CAT", options).unknown_in_prompt == 6);
    options.strict = true;
    CHECK_THROWS_WITH(generator.generate("THE CAT", options), Contains("6 symbols the vocabulary lacks"));
    CHECK_THROWS_WITH(inference::Translator(trained_checkpoint()), Contains("language model"));
}

TEST_CASE("generation options are checked by their table and the decoding options' own", "[text][generate][errors]") {
    inference::GenerationOptions options;
    CHECK_NOTHROW(options.validate());
    options.decoding.beam_size = 2;
    CHECK_THROWS_WITH(options.validate(), Contains("beam size must be 1, got 2"));
    options.decoding.beam_size = 1;
    options.decoding.top_k = -2;
    CHECK_THROWS_WITH(options.validate(), Contains("\"top_k\" must be 0 or more, got -2"));
    options.decoding.top_k = 0;
    CHECK_THROWS_WITH(options.set("max_tokens", {"-1"}), Contains("--max-tokens: must be 0 or more, got -1"));
    options.set("strict", {});
    CHECK(options.strict);
}
