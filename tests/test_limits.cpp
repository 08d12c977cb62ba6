// The limits a file may not go past, refused with a message before anything large is allocated:
// the parameters a config asks for (counted from the config alone), a model file whose config does
// not describe its tensors, a tensor larger than its file, a line over 1 MiB, a side over 4096
// symbols.
#include "helpers.h"

#include <cstring>

#include "seqgrad/models/registry.h"
#include "seqgrad/text.h"
#include "seqgrad/training.h"

using namespace seqgrad;
using namespace seqgrad::models;
using namespace seqgrad::training;
using Catch::Matchers::Contains;
using testing::error_of;
using testing::TempFile;

namespace {

// Configs of every kind and option that changes the parameter count.
std::vector<ModelConfig> varied_configs() {
    std::vector<ModelConfig> configs;
    ModelConfig t = model_kind("transformer").defaults();
    t.src_vocab = 13;
    t.tgt_vocab = 17;
    TransformerKeys& keys = t.keys<TransformerKeys>();
    keys.d_model = 8;
    keys.n_heads = 2;
    keys.d_ff = 12;
    keys.max_seq_len = 9;
    for (const char* norm : {"post", "pre"})
        for (const char* positional : {"sinusoidal", "learned", "rope"})
            for (const auto& [enc, dec] : {std::pair{1, 2}, std::pair{3, 0}}) {
                keys.norm = norm;
                keys.positional = positional;
                keys.n_enc_layers = enc;
                keys.n_dec_layers = dec;
                configs.push_back(t);
            }
    keys.n_enc_layers = keys.n_dec_layers = 1;
    keys.tie_output = true;
    configs.push_back(t);
    t.src_vocab = t.tgt_vocab;
    keys.share_embeddings = true;
    configs.push_back(t);
    for (const int layers : {1, 3}) {
        ModelConfig s = model_kind("seq2seq").defaults();
        ModelConfig a = model_kind("attn_seq2seq").defaults();
        for (ModelConfig* r : {&s, &a}) {
            r->src_vocab = 11;
            r->tgt_vocab = 7;
        }
        s.keys<Seq2SeqKeys>().hidden_size = a.keys<AttnSeq2SeqKeys>().hidden_size = 5;
        s.keys<Seq2SeqKeys>().num_layers = a.keys<AttnSeq2SeqKeys>().num_layers = layers;
        for (const char* decoder : {"init_state", "context_input"}) {
            s.keys<Seq2SeqKeys>().decoder = decoder;
            configs.push_back(s);
        }
        for (const char* attention : {"dot", "additive"}) {
            a.keys<AttnSeq2SeqKeys>().attention = attention;
            configs.push_back(a);
        }
    }
    return configs;
}

}  // namespace

TEST_CASE("each kind counts a config's parameters as the built model has them", "[limits]") {
    for (const ModelConfig& config : varied_configs()) {
        INFO(config.to_json());
        Generator gen(1);
        CHECK(model_kind(config.model).parameters(config) == make_model(config, gen)->num_parameters());
    }
}

TEST_CASE("a config that asks for more than 2^31 parameters is refused before anything is allocated", "[limits]") {
    // The peak, not the bytes in use: memory allocated and freed again on the way to the error
    // would leave the bytes in use as they were.
    reset_peak_bytes_in_use();
    const AllocatorStats before = allocator_stats();
    const std::string text = R"({"model": "transformer", "src_vocab": 4000000, "tgt_vocab": 4000000,
                                 "d_model": 1024, "n_heads": 8, "n_layers": 1, "d_ff": 4096})";
    CHECK_THAT(error_of([&] { ModelConfig::from_json(text); }), Contains("parameters; the limit is 2147483648"));
    CHECK(allocator_stats().peak_bytes_in_use == before.bytes_in_use);
    CHECK_THAT(error_of([] {
                   ModelConfig::from_json(R"({"model": "seq2seq", "src_vocab": 8, "tgt_vocab": 8,
                                                        "hidden_size": 70000})");
               }),
               Contains("\"hidden_size\" must be in [1, 65536]"));
}

TEST_CASE("a model file whose config does not describe its tensors is refused before the model is built", "[limits]") {
    ModelConfig small = model_kind("seq2seq").defaults();
    small.src_vocab = small.tgt_vocab = 8;
    small.keys<Seq2SeqKeys>().hidden_size = 4;
    small.keys<Seq2SeqKeys>().num_layers = 1;
    Generator gen(1);
    const auto model = make_model(small, gen);
    text::TextSides sides;
    sides.source_vocab = sides.target_vocab = text::Vocabulary::from_symbols({"a", "b", "c", "d"});
    const TempFile file("", ".safetensors");
    text::save_model(file.path(), *model, sides, "corpus", 1);
    // The same tensors under a config that asks for a model of 64 million parameters.
    SafetensorsFile crafted = SafetensorsFile::load(file.path());
    ModelConfig big = small;
    big.keys<Seq2SeqKeys>().hidden_size = 2000;
    crafted.set_metadata("config", big.to_json());
    crafted.save(file.path());
    reset_peak_bytes_in_use();  // what earlier tests reached is not this load's
    const AllocatorStats before = allocator_stats();
    CHECK_THAT(error_of([&] { text::load_model(file.path()); }),
               Contains("the config describes a model of") && Contains("but the file holds"));
    CHECK(allocator_stats().peak_bytes_in_use - before.bytes_in_use < (int64_t{1} << 20));
}

TEST_CASE("a file that declares a 10^12-element tensor is refused without reading it", "[limits]") {
    const std::string header = R"({"t":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,4000000000000]}})";
    std::string bytes(8, '\0');
    const uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    const TempFile file(bytes + header + std::string(64, 'x'), ".safetensors");
    CHECK_THAT(error_of([&] { SafetensorsFile::load(file.path()); }), Contains("reach past the end"));
}

TEST_CASE("a line over 1 MiB and a side over 4096 symbols are refused", "[limits]") {
    std::string text = "ok\tok\n";
    text.append(kMaxLineBytes + 10, 'a');
    text.append("\tb\n");
    const TempFile long_line(text);
    CHECK_THAT(error_of([&] {
                   LineReader reader(long_line.path());
                   for (std::string line; reader.next(line);) {}
               }),
               Contains(long_line.path() + ":2: a line longer than 1048576 bytes"));
    std::string corpus;
    for (int i = 0; i < 40; ++i) corpus += detail::concat("w", i, "\tx\n");
    corpus.append(static_cast<size_t>(kMaxSymbolsPerSide) + 1, 'a');
    corpus.append("\tx\n");
    const TempFile tsv(corpus);
    TrainingOptions o;
    o.task = "corpus";
    o.train_files = {tsv.path()};
    o.max_steps = 1;
    CHECK_THAT(error_of([&] { prepare_pairs(o); }),
               Contains(":41: the source has 4097 symbols; a side may have at most 4096"));
}

TEST_CASE("a number beyond a double's range is invalid JSON in every reader of JSON, not a crash", "[limits]") {
    // The JSON library reports such a number with an exception of another type than a syntax error.
    CHECK_THAT(error_of([] { (void)ModelConfig::from_json(R"({"model": "transformer", "d_model": 1e999})"); }),
               Contains("not valid JSON"));
    CHECK_THAT(error_of([] { (void)TrainingOptions::from_json(R"({"lr": 51e308})"); }), Contains("not valid JSON"));
    CHECK_THAT(error_of([] { (void)Progress::from_json(R"({"step": -1e400})"); }), Contains("not valid JSON"));
    CHECK_THAT(error_of([] { (void)text::Vocabulary::from_json("[1e999]"); }), Contains("not valid JSON"));
}

TEST_CASE("an option's array elements must fit their type: a generator state word past 2^64 is refused", "[limits]") {
    // A valid progress with its generator state replaced by `words`.
    const auto with_random = [](const std::string& words) {
        std::string text = Progress().to_json();
        const size_t at = text.find("\"random\":[");
        REQUIRE(at != std::string::npos);
        const size_t end = text.find(']', at);
        return text.substr(0, at) + "\"random\":[" + words + text.substr(end);
    };
    CHECK_NOTHROW(Progress::from_json(with_random("1,2,3,4")));
    // 40487275983244170068 > 2^64 reads as a double, whose conversion to an integer was undefined.
    CHECK_THAT(error_of([&] { (void)Progress::from_json(with_random("1,40487275983244170068,2,3")); }),
               Contains("random"));
    CHECK_THAT(error_of([&] { (void)Progress::from_json(with_random("1,-2,3,4")); }), Contains("random"));
    CHECK_THAT(error_of([] { (void)TrainingOptions::from_json(R"({"train_files": ["a.tsv", 7]})"); }),
               Contains("train_files"));
}
