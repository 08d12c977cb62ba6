// Helpers shared by the tests: deterministic random tensors and elementwise comparison.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "seqgrad/seqgrad.h"

namespace seqgrad::testing {

// Values in [low, high) from a fixed seed, as a leaf that requires grad.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f,
                            bool requires_grad = true) {
    Generator gen(seed);
    return Tensor::uniform(shape, low, high, gen, requires_grad);
}

// Largest |a - b| over the elements; shapes must agree.
inline float max_abs_diff(const Tensor& a, const Tensor& b) {
    REQUIRE(a.shape() == b.shape());
    float worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i) worst = std::max(worst, std::fabs(a.data()[i] - b.data()[i]));
    return worst;
}

// Runs gradcheck and reports its message on failure.
inline void require_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {}) {
    const GradcheckResult result = gradcheck(f, inputs, options);
    INFO(result.message);
    REQUIRE(result.ok);
}

// Row b of a right-padded id batch without its padding: [1, length]. With it, a padded batch's
// answers can be compared with each row's answers alone (padding must never change an answer).
inline IntTensor unpadded_row(const IntTensor& ids, int64_t b) {
    std::vector<int64_t> row;
    for (int64_t j = 0; j < ids.size(1); ++j)
        if (ids.data()[b * ids.size(1) + j] != 0) row.push_back(ids.data()[b * ids.size(1) + j]);
    const auto len = static_cast<int64_t>(row.size());
    return IntTensor::from_vector(std::move(row), {1, len});
}

// A ragged, right-padded batch for the sequence models' tests (real ids 4..8): rows of different
// lengths, the longest not first, a one-token source row. tgt is <s> y1 .. yn </s> then <pad>.
inline const IntTensor kRaggedSrc = IntTensor::from_vector({4, 5, 6, 0, 0,  //
                                                            6, 4, 7, 5, 5,  //
                                                            5, 0, 0, 0, 0},
                                                           {3, 5});
inline const IntTensor kRaggedTgt = IntTensor::from_vector({1, 4, 6, 2, 0, 0,  //
                                                            1, 5, 2, 0, 0, 0,  //
                                                            1, 8, 6, 4, 5, 2},
                                                           {3, 6});

// A module's parameter by its dotted name; fails the test if there is none.
inline Tensor parameter(const nn::Module& module, const std::string& name) {
    for (const auto& [n, p] : module.named_parameters())
        if (n == name) return p;
    FAIL("no parameter " << name);
    return Tensor();
}

// The synthetic "reverse" task at a test's size: words of 2 to 6 symbols over 6, `held_out` dev and
// as many test words, batches of `batch` words, dev decoded to at most 12 tokens. The caller sets
// the budget, the schedule and whatever else its test is about.
inline training::TrainingOptions reverse_words(int64_t train_size, int64_t held_out, int64_t batch) {
    training::TrainingOptions o;
    o.task = "reverse";
    o.synthetic.train_size = train_size;
    o.synthetic.dev_size = held_out;
    o.synthetic.test_size = held_out;
    o.synthetic.vocab_size = 6;
    o.synthetic.min_length = 2;
    o.synthetic.max_length = 6;
    o.batches.max_sentences = batch;
    o.eval_max_len = 12;
    return o;
}

// A GPT as small as a test needs: one layer of width 16, 2 heads, a context of `context` tokens,
// dropout 0.1 (so that resuming must restore the dropout generator too).
inline models::ModelConfig tiny_gpt(int64_t context = 16) {
    models::ModelConfig c = models::model_kind("gpt").defaults();
    models::GptKeys& g = c.keys<models::GptKeys>();
    g.context = context;
    g.d_model = 16;
    g.n_heads = 2;
    g.n_layers = 1;
    g.d_ff = 32;
    c.dropout = 0.1f;
    return c;
}

// A text with some structure to learn: lines of six words from ten, 6,000 characters or so.
inline std::string rhymes() {
    const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far"};
    std::string text;
    Generator gen(11);
    while (text.size() < 6000) {
        for (int w = 0; w < 6; ++w) text += std::string(w ? " " : "") + words[gen.below(10)];
        text += ".\n";
    }
    return text;
}

// The text task on the file at `path` with the GPT's recipe, batches of 8 windows, 5 warm-up
// steps and a dev evaluation every 10; the caller sets the budget.
inline training::TrainingOptions text_options(const std::string& path) {
    training::TrainingOptions o = training::recipe("gpt").training;
    o.task = "text";
    o.text = path;
    o.batches.max_sentences = 8;
    o.warmup_steps = 5;
    o.eval_every_steps = 10;
    o.log_every = 1000;
    return o;
}

// The LSTMs' size in a config of either recurrent model (seq2seq, attn_seq2seq).
inline models::LstmShape& lstm_of(models::ModelConfig& c) {
    if (c.model == "seq2seq") return c.keys<models::Seq2SeqKeys>();
    return c.keys<models::AttnSeq2SeqKeys>();
}

// A Pre-LN Transformer as small as a test needs: as many encoder as decoder layers, no dropout
// unless the test sets it. Vocabulary sizes are left for training to set.
inline models::ModelConfig small_transformer(int64_t d_model, int64_t heads, int64_t layers, int64_t d_ff,
                                             int64_t max_len) {
    models::ModelConfig c = models::model_kind("transformer").defaults();
    models::TransformerKeys& t = c.keys<models::TransformerKeys>();
    t.d_model = d_model;
    t.n_heads = heads;
    t.n_layers = t.n_enc_layers = t.n_dec_layers = layers;
    t.d_ff = d_ff;
    t.max_seq_len = max_len;
    t.norm = "pre";
    c.dropout = 0;
    return c;
}

// Packing turned off (set_packing_enabled) while it lives, as on a CPU or build without oneDNN's
// kernels, so that the sgemm fallback runs on every machine.
struct PackingDisabled {
    PackingDisabled() { set_packing_enabled(false); }
    ~PackingDisabled() { set_packing_enabled(true); }
    PackingDisabled(const PackingDisabled&) = delete;
    PackingDisabled& operator=(const PackingDisabled&) = delete;
};

// The pool's thread count for a scope: remembers the caller's count, optionally sets another, and
// puts the caller's back when the scope ends, also when a REQUIRE throws out of it (a test that
// changed the count and failed would otherwise leave every later test at its count).
class ThreadCountScope {
public:
    ThreadCountScope() : before_(get_num_threads()) {}
    explicit ThreadCountScope(int threads) : ThreadCountScope() { set_num_threads(threads); }
    ~ThreadCountScope() { set_num_threads(before_); }
    ThreadCountScope(const ThreadCountScope&) = delete;
    ThreadCountScope& operator=(const ThreadCountScope&) = delete;

private:
    int before_;
};

// Marks the running test case skipped, saying why: it must be called before the case's first check
// (a case that checked something and then skips fails, naming the count), and the caller returns
// after it. A run whose every case skipped exits with 77, which CTest reports as skipped
// (tests/main.cpp); under CI a skip not listed for the machine's kind fails the run
// (tests/expected_skips/, scripts/test.sh).
void skip_test(const std::string& why);

// The packed kernels of this machine, for a test's output: which path the packed tests took.
inline std::string packed_kernels_line() {
    const auto one = [](Precision p) {
        const char* packed = packing_available(p) ? "yes" : p == Precision::float32 ? "no, sgemm" : "no, refused";
        return std::string(precision_name(p)) + " " + packed_kernel_name(p) + " (packed: " + packed + ")";
    };
    return "packed weights: " + one(Precision::float32) + "; " + one(Precision::int8) + ", weights in " +
           std::to_string(int8_weight_levels()) + " levels";
}

// A file with the given bytes in the temporary directory, removed at the end of the test.
class TempFile {
public:
    explicit TempFile(const std::string& bytes, const std::string& suffix = ".txt") {
        static int counter = 0;
        path_ = std::filesystem::temp_directory_path() /
                ("seqgrad_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + suffix);
        std::ofstream(path_, std::ios::binary) << bytes;
    }
    ~TempFile() { std::filesystem::remove(path_); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    std::string path() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

// A fresh directory under the system temp directory, named for this process so that tests running side
// by side never share one, removed when it goes out of scope.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& tag) {
        path = std::filesystem::temp_directory_path() / ("seqgrad_test_" + tag + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    // The path of `name` inside, with whatever an earlier use left there removed (a run's output
    // directory, say, which the code under test creates).
    std::string fresh(const std::string& name) const {
        const std::filesystem::path inside = path / name;
        std::filesystem::remove_all(inside);
        return inside.string();
    }
    std::vector<std::string> listing() const {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
};

// The message of the Error that `f` throws; fails the test if it throws none.
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    FAIL("expected a seqgrad::Error");
    return {};
}

}  // namespace seqgrad::testing
