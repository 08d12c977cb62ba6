// Ensembles (models/ensemble.h, text/ensemble.h): several checkpoints decoding as one, the
// Translator over them, and checkpoints averaged into one (train's keep_checkpoints, `average`).
#include "helpers.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "seqgrad/inference/translator.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"

using namespace seqgrad;
using namespace seqgrad::models;
using namespace seqgrad::training;
using seqgrad::inference::Translator;
using seqgrad::testing::error_of;
using seqgrad::testing::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const TempDir& scratch() {
    static const TempDir dir("ensemble");
    return dir;
}

TrainingOptions reverse_task() {
    TrainingOptions o = seqgrad::testing::reverse_words(300, 40, 16);
    o.schedule = "constant";
    o.lr = 3e-3;
    o.label_smoothing = 0;
    o.max_steps = 40;
    o.eval_every_steps = 10;
    return o;
}

ModelConfig small(const std::string& kind) {
    ModelConfig c = seqgrad::training::recipe(kind).model;
    if (kind == "transformer") {
        TransformerKeys& t = c.keys<TransformerKeys>();
        t.d_model = 16;
        t.n_heads = 2;
        t.n_layers = t.n_enc_layers = t.n_dec_layers = 1;
        t.d_ff = 32;
        t.max_seq_len = 32;
    } else {
        seqgrad::testing::lstm_of(c).hidden_size = 16;
        seqgrad::testing::lstm_of(c).num_layers = 1;
    }
    return c;
}

// A short run of the reverse task (once per name and test program), keeping its last 3 evaluated
// weights.
std::string run(const std::string& kind, uint64_t seed = 1) {
    const std::string dir = (scratch().path / (kind + "-" + std::to_string(seed))).string();
    if (!fs::exists(dir)) {
        TrainingOptions o = reverse_task();
        o.seed = seed;
        o.keep_checkpoints = 3;
        train(small(kind), o, dir);
    }
    return dir;
}

const std::vector<Example>& dev_examples() {
    static const std::vector<Example> dev = [] {
        DataRequest request;
        request.train = false;
        return prepare_pairs(reverse_task(), request).dev;
    }();
    return dev;
}

std::vector<float> flat_weights(const Model& model) {
    std::vector<float> all;
    for (const auto& [name, t] : model.state_dict())
        for (const float v : t.to_vector()) all.push_back(v);
    return all;
}

// The largest difference between `mean`'s weights and the element-wise mean of those in `files`.
float distance_from_mean(const std::vector<std::string>& files, const Model& mean) {
    std::vector<std::vector<float>> each;
    for (const std::string& file : files) each.push_back(flat_weights(*text::load_model(file).model));
    const std::vector<float> got = flat_weights(mean);
    REQUIRE(got.size() == each[0].size());
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        float sum = 0;
        for (const auto& weights : each) sum += weights[i];
        worst = std::max(worst, std::fabs(got[i] - sum / static_cast<float>(each.size())));
    }
    return worst;
}

DecodingOptions beam(int64_t width, int64_t nbest) {
    DecodingOptions o;
    o.beam_size = width;
    o.nbest = nbest;
    o.max_len = 12;
    return o;
}

}  // namespace

TEST_CASE("an ensemble of one checkpoint decodes exactly as its model alone", "[ensemble]") {
    const text::LoadedModel alone = text::load_model(run("transformer"));
    text::Ensemble one({run("transformer")});
    const std::vector<Example>& dev = dev_examples();
    for (const DecodingOptions& options : {beam(1, 1), beam(4, 3)}) {
        std::vector<std::vector<std::string>> a, b;
        const PairScores ra = evaluate(*alone.model, dev, alone.source_vocab, alone.target_vocab, options, &a);
        const PairScores rb = evaluate(one, dev, options, &b);
        CHECK(ra.wer == rb.wer);
        CHECK(ra.per == rb.per);
        CHECK(a == b);
    }
    // The same hypotheses and the same scores, bit for bit, through the Translator.
    const std::vector<std::string> inputs{"abc", "fedcb", "a", "cabbage"};
    const auto direct = Translator(run("transformer")).translate(inputs, beam(4, 3));
    const auto listed = Translator(std::vector<std::string>{run("transformer")}, {}).translate(inputs, beam(4, 3));
    REQUIRE(direct.size() == listed.size());
    for (size_t i = 0; i < direct.size(); ++i) {
        REQUIRE(direct[i].size() == listed[i].size());
        for (size_t j = 0; j < direct[i].size(); ++j) {
            CHECK(direct[i][j].text == listed[i][j].text);
            CHECK(direct[i][j].score == listed[i][j].score);
        }
    }
}

TEST_CASE("two copies of one checkpoint find the same hypotheses as one", "[ensemble]") {
    const std::vector<std::string> inputs{"abc", "fedcb", "a", "ddeeff", "bad"};
    for (const std::string kind : {"transformer", "attn_seq2seq"}) {
        const Translator one(run(kind));
        const Translator two(std::vector<std::string>{run(kind), run(kind)}, {});
        for (const DecodingOptions& options : {beam(1, 1), beam(5, 5)}) {
            const auto a = one.translate(inputs, options);
            const auto b = two.translate(inputs, options);
            for (size_t i = 0; i < inputs.size(); ++i) {
                INFO(kind << " beam " << options.beam_size << " input " << inputs[i]);
                REQUIRE(a[i].size() == b[i].size());
                for (size_t j = 0; j < a[i].size(); ++j) {
                    CHECK(a[i][j].text == b[i][j].text);
                    CHECK(std::fabs(a[i][j].score - b[i][j].score) < 1e-5f);
                }
            }
        }
    }
}

TEST_CASE("each step of an ensemble is its models' weighted sum of log-probabilities", "[ensemble]") {
    const text::LoadedModel a = text::load_model(run("transformer"));
    const text::LoadedModel b = text::load_model(run("attn_seq2seq"));
    NoGradGuard no_grad;
    EnsembleDecoder ensemble({a.model.get(), b.model.get()}, {3, 1});
    CHECK(ensemble.weights() == std::vector<double>{0.75, 0.25});
    const IntTensor source = IntTensor::from_vector({5, 6, 7, 8, 6, 5, 0, 0}, {2, 4});  // the second row padded
    auto state = ensemble.start_decoding(source);
    auto state_a = a.model->start_decoding(source);
    auto state_b = b.model->start_decoding(source);
    const auto expected = [&](const Tensor& la, const Tensor& lb) {
        return add(mul(log_softmax(la), 0.75f), mul(log_softmax(lb), 0.25f));
    };
    const IntTensor prefix = start_of_sequence(2);
    Tensor got = ensemble.prefill(*state, prefix);
    CHECK(testing::max_abs_diff(got, expected(a.model->prefill(*state_a, prefix), b.model->prefill(*state_b, prefix))) <
          1e-5f);
    // Steps, and a reordering of the rows that every model's state follows.
    for (const std::vector<int64_t>& rows : {std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, 1}}) {
        state->select_rows(rows);
        state_a->select_rows(rows);
        state_b->select_rows(rows);
        const IntTensor tokens = IntTensor::from_vector({6, 7}, {2});
        got = ensemble.decode_step(*state, tokens);
        const Tensor want = expected(a.model->decode_step(*state_a, tokens), b.model->decode_step(*state_b, tokens));
        CHECK(testing::max_abs_diff(got, want) < 1e-5f);
    }
    CHECK(ensemble.max_decode_length() == std::min(a.model->max_decode_length(), b.model->max_decode_length()));
}

TEST_CASE("ensemble weights are normalised to sum to 1, and bad ones refused", "[ensemble][errors]") {
    CHECK(normalised_weights({}, 4) == std::vector<double>(4, 0.25));
    CHECK(normalised_weights({2, 6}, 2) == std::vector<double>{0.25, 0.75});
    CHECK_THAT(error_of([] { normalised_weights({1}, 2); }), Contains("one weight per model"));
    CHECK_THAT(error_of([] { normalised_weights({1, 0}, 2); }), Contains("weight 2 is 0"));
    CHECK_THAT(error_of([] { normalised_weights({1, -1}, 2); }), Contains("must be positive"));
    CHECK_THAT(error_of([] { normalised_weights({1, NAN}, 2); }), Contains("must be positive"));
    CHECK_THAT(error_of([] { normalised_weights({}, 0); }), Contains("at least one model"));
    // Equal weights given or not decode alike.
    const std::vector<std::string> both{run("transformer"), run("attn_seq2seq")};
    const auto a = Translator(both, {}).translate({"abcd", "fed"}, beam(3, 2));
    const auto b = Translator(both, {7, 7}).translate({"abcd", "fed"}, beam(3, 2));
    for (size_t i = 0; i < a.size(); ++i)
        for (size_t j = 0; j < a[i].size(); ++j) CHECK(a[i][j].score == b[i][j].score);
}

TEST_CASE("models of different kinds decode together, and their ensemble scores the dev split", "[ensemble]") {
    const std::vector<std::string> runs{run("transformer"), run("attn_seq2seq")};
    text::Ensemble both(runs);
    const PairScores r = evaluate(both, dev_examples(), beam(4, 1));
    CHECK(r.words == static_cast<int64_t>(dev_examples().size()));
    // The scores are the ensemble's own outputs' (the Translator over the same checkpoints),
    // counted here: a word is wrong unless its best output is one of its references; the symbol
    // errors are the edits to the nearest reference (the shorter among equally near), over its
    // length. Short training leaves most words wrong, so the symbol errors say the most.
    std::vector<std::string> inputs;
    for (const Example& e : dev_examples()) inputs.push_back(e.name);
    const auto outputs = Translator(runs, {}).translate(inputs, beam(4, 1));
    const auto edits = [](const std::string& a, const std::vector<std::string>& b) {
        std::vector<int64_t> row(b.size() + 1);
        for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
        for (size_t i = 1; i <= a.size(); ++i) {
            int64_t diagonal = row[0];
            row[0] = static_cast<int64_t>(i);
            for (size_t j = 1; j <= b.size(); ++j) {
                const int64_t substitute = diagonal + (std::string(1, a[i - 1]) == b[j - 1] ? 0 : 1);
                diagonal = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
            }
        }
        return row[b.size()];
    };
    int64_t wrong = 0, symbol_errors = 0, symbols = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        int64_t best = INT64_MAX, length = 0;
        for (const auto& reference : dev_examples()[i].references) {
            const int64_t d = edits(outputs[i].front().text, reference);
            const auto n = static_cast<int64_t>(reference.size());
            if (d < best || (d == best && n < length)) best = d, length = n;
        }
        wrong += best == 0 ? 0 : 1;
        symbol_errors += best;
        symbols += length;
    }
    const auto n = static_cast<double>(inputs.size());
    CHECK(r.wer == Approx(100.0 * static_cast<double>(wrong) / n));
    CHECK(r.per == Approx(100.0 * static_cast<double>(symbol_errors) / static_cast<double>(symbols)));
    CHECK(r.per < 100);  // the models learned something
}

TEST_CASE("an ensemble refuses a language model, naming it", "[ensemble][errors]") {
    std::vector<text::LoadedModel> models{text::load_model(run("transformer")), text::load_model(run("transformer"))};
    ModelConfig gpt = seqgrad::testing::tiny_gpt();
    gpt.vocab = models[1].target_vocab.size();
    Generator gen(1);
    models[1].model = make_model(gpt, gen);
    models[1].path = "lm.safetensors";
    CHECK_THAT(error_of([&] { text::Ensemble(std::move(models)); }), Contains("lm.safetensors holds a language model"));
}

TEST_CASE("an ensemble refuses models whose target sides differ, naming the difference", "[ensemble][errors]") {
    const auto loaded = [] { return text::load_model(run("transformer")); };
    {
        std::vector<text::LoadedModel> models{loaded(), loaded()};
        // The last symbol replaced by one that sorts after every other: the same size, one id differs.
        std::vector<std::string> symbols(models[0].target_vocab.symbols().begin() + 4,
                                         models[0].target_vocab.symbols().end());
        const std::string last = symbols.back();
        symbols.back() = "~~";
        models[1].target_vocab = text::Vocabulary::from_symbols(symbols);
        const int64_t id = models[0].target_vocab.size() - 1;
        CHECK_THAT(error_of([&] { text::Ensemble(std::move(models)); }),
                   Contains("target vocabularies") &&
                       Contains("id " + std::to_string(id) + " is \"" + last + "\" in one and \"~~\" in the other"));
    }
    {
        std::vector<text::LoadedModel> models{loaded(), loaded()};
        models[1].target_tokenizer = text::Tokenizer::bytes();
        CHECK_THAT(error_of([&] { text::Ensemble(std::move(models)); }), Contains("target tokenizers differ"));
    }
    {
        // A source side of its own is accepted: that model reads the inputs its own way.
        std::vector<text::LoadedModel> models{loaded(), loaded()};
        models[1].source_tokenizer = text::Tokenizer::bytes();
        const text::Ensemble ensemble(std::move(models));
        CHECK(!ensemble.shares_source(1));
        const auto ids = ensemble.encode_sources({"ab\xc3\xa9"});
        CHECK(ids[0][0].size() == 3);  // characters
        CHECK(ids[1][0].size() == 4);  // bytes
    }
}

TEST_CASE("train keeps the weights of its last evaluations, named by step", "[ensemble][training]") {
    const CheckpointDir dir(run("transformer"));
    const std::vector<std::string> kept = dir.kept_files();
    REQUIRE(kept.size() == 3);  // of the evaluations at steps 10, 20, 30, 40
    CHECK(fs::path(kept[0]).filename() == "step-000000020.safetensors");
    CHECK(fs::path(kept[2]).filename() == "step-000000040.safetensors");
    CHECK(text::load_model(kept[1]).step == 30);
    // The last evaluation was at the end: its weights are the run's last.
    CHECK(flat_weights(*text::load_model(kept[2]).model) == flat_weights(*text::load_model(dir.model_file()).model));
}

TEST_CASE("the mean of N copies of one checkpoint is that checkpoint, exactly", "[ensemble][average]") {
    const std::string file = CheckpointDir(run("attn_seq2seq")).kept_files().back();
    const text::LoadedModel one = text::load_model(file);
    for (const size_t copies : {size_t{1}, size_t{3}, size_t{7}}) {
        const text::LoadedModel mean = text::average_models(std::vector<std::string>(copies, file));
        CHECK(flat_weights(*mean.model) == flat_weights(*one.model));
        CHECK(mean.step == one.step);
    }
}

TEST_CASE("average writes the mean of kept weights as a checkpoint that loads, decodes and resumes",
          "[ensemble][average]") {
    const std::string source = run("transformer", 2);
    const std::vector<std::string> kept = CheckpointDir(source).kept_files();
    REQUIRE(kept.size() == 3);
    const std::string out = scratch().fresh("averaged");
    write_averaged_checkpoint(kept, source, out);
    const text::LoadedModel mean = text::load_model(out);
    CHECK(mean.step == 40);
    CHECK(distance_from_mean(kept, *mean.model) < 1e-6f);  // element by element, the mean of the three
    // It evaluates as any checkpoint does.
    const PairScores r = evaluate(*mean.model, dev_examples(), mean.source_vocab, mean.target_vocab, beam(1, 1));
    CHECK(r.words == static_cast<int64_t>(dev_examples().size()));
    CHECK(Translator(out).translate({"abc"})[0].size() == 1);
    // The run goes on from the mean, with the run's options and optimizer.
    const TrainingResult resumed = resume(out, 0, 0, 45);
    CHECK(resumed.stop_reason == "budget");
    CHECK(text::load_model(CheckpointDir(out).model_file()).step == 45);
    // A directory that holds a checkpoint is not overwritten.
    CHECK_THAT(error_of([&] { write_averaged_checkpoint(kept, source, out); }), Contains("holds a checkpoint already"));
}

TEST_CASE("averaging checkpoints of different models is refused", "[ensemble][average][errors]") {
    const std::vector<std::string> files{run("transformer"), run("attn_seq2seq")};
    CHECK_THAT(error_of([&] { text::average_models(files); }), Contains("differ in their model configs"));
}

TEST_CASE("averaging refuses one model's weights written for another task, tokenizer or vocabulary",
          "[ensemble][average][errors]") {
    const std::string file = CheckpointDir(run("transformer")).kept_files().back();
    const text::LoadedModel m = text::load_model(file);
    const auto rewritten = [&](const std::string& name, const std::string& task, text::TextSides sides) {
        const std::string path = scratch().fresh(name + ".safetensors");
        text::save_model(path, *m.model, sides, task, m.step);
        return path;
    };
    const text::TextSides same = m;
    CHECK(flat_weights(*text::average_models({file, rewritten("same", m.task, same)}).model) == flat_weights(*m.model));
    CHECK_THAT(error_of([&] {
                   text::average_models({file, rewritten("task", "copy", same)});
               }),
               Contains("differ in their tasks"));
    text::TextSides bytes = same;
    bytes.target_tokenizer = text::Tokenizer::bytes();
    CHECK_THAT(error_of([&] {
                   text::average_models({file, rewritten("tokenizer", m.task, bytes)});
               }),
               Contains("differ in their tokenizers"));
    text::TextSides other = same;  // the same size, one symbol different
    std::vector<std::string> symbols(m.target_vocab.symbols().begin() + 4, m.target_vocab.symbols().end());
    symbols.back() = "~~";
    other.target_vocab = text::Vocabulary::from_symbols(symbols);
    CHECK_THAT(error_of([&] {
                   text::average_models({file, rewritten("vocabulary", m.task, other)});
               }),
               Contains("differ in their vocabularies"));
}

TEST_CASE("a GPT's kept weights average into a checkpoint that evaluates and resumes", "[ensemble][average][gpt]") {
    const std::string text = scratch().fresh("rhymes.txt");
    {
        std::ofstream out(text);
        for (int i = 0; i < 200; ++i) out << "the cat sat on the mat and the dog ran after it " << i % 7 << "\n";
    }
    TrainingOptions o = seqgrad::testing::text_options(text);
    o.max_steps = 30;
    o.keep_checkpoints = 3;
    const std::string dir = scratch().fresh("gpt_run");
    train(seqgrad::testing::tiny_gpt(), o, dir);
    const std::vector<std::string> kept = CheckpointDir(dir).kept_files();
    REQUIRE(kept.size() == 3);
    const std::string out = scratch().fresh("gpt_mean");
    write_averaged_checkpoint(kept, dir, out);
    const text::LoadedModel mean = text::load_model(out);
    CHECK(mean.step == 30);
    CHECK(mean.task == "text");
    CHECK(distance_from_mean(kept, *mean.model) < 1e-6f);
    CHECK(flat_weights(*mean.model) != flat_weights(*text::load_model(kept.back()).model));  // the mean, not the last
    // It resumes as a language model's run, with the run's options and its text.
    const TrainingResult resumed = resume(out, 0, 0, 35);
    CHECK(resumed.stop_reason == "budget");
    CHECK(text::load_model(CheckpointDir(out).model_file()).step == 35);
    CHECK(std::isfinite(std::get<TextScores>(resumed.last_dev).loss));
}
