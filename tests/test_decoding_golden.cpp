// Decoding keeps choosing what it chose: greedy decoding and beam search over every committed
// parity model (tests/fixtures/*.safetensors, PyTorch's weights) are compared with the hypotheses
// recorded in tests/fixtures/decoding_golden.txt. Work on the decoders' speed (key/value caches,
// fused kernels, beam bookkeeping) must leave every token the same and every score within float
// rounding.
//
// The file has one line per hypothesis:
//   <fixture> <search> <source row> <rank> <finished 0|1> <log_prob> <score> : <tokens...>
// To record it again after a change that is meant to change the hypotheses (never to make this
// test pass), run the test with SEQGRAD_WRITE_DECODING_GOLDEN=1 and review the diff.
#include "helpers.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "seqgrad/models/decoding.h"
#include "seqgrad/models/registry.h"

using namespace seqgrad;
using namespace seqgrad::models;
namespace fs = std::filesystem;

namespace {

const std::string kGoldenPath = std::string(SEQGRAD_FIXTURES_DIR) + "/decoding_golden.txt";

struct Search {
    const char* name;
    DecodeOptions options;
    int64_t nbest;
};

// Greedy; beam 4 keeping all 4; beam 3 with </s> barred before the 4th token (short outputs of
// the tiny vocabularies make every branch of the search happen: ended beams, max_len cut-offs).
std::vector<Search> searches() {
    return {{"greedy", {.max_len = 8, .beam_size = 1, .length_penalty = 0.6f, .min_len = 0}, 1},
            {"beam4", {.max_len = 8, .beam_size = 4, .length_penalty = 0.6f, .min_len = 0}, 4},
            {"beam3_min4", {.max_len = 7, .beam_size = 3, .length_penalty = 1.0f, .min_len = 4}, 1}};
}

// Every committed model fixture, its model rebuilt with PyTorch's weights.
std::vector<std::pair<std::string, std::shared_ptr<Seq2SeqModel>>> parity_models(std::vector<IntTensor>& sources,
                                                                                 bool packed) {
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(SEQGRAD_FIXTURES_DIR))
        if (entry.path().extension() == ".safetensors") paths.push_back(entry.path().string());
    std::sort(paths.begin(), paths.end());
    std::vector<std::pair<std::string, std::shared_ptr<Seq2SeqModel>>> out;
    for (const std::string& path : paths) {
        const std::string stem = fs::path(path).stem().string();
        if (stem.rfind("lstm_", 0) == 0 || stem.rfind("multi_head_attention_", 0) == 0) continue;  // single layers
        const SafetensorsFile file = SafetensorsFile::load(path);
        const ModelConfig config = ModelConfig::from_json(file.metadata("config"), /*strict=*/false);
        Generator gen(0);
        auto model = make_model(config, gen);
        std::map<std::string, Tensor> state;
        for (const std::string& name : file.names())
            if (name.rfind("input.", 0) != 0 && name.rfind("expect.", 0) != 0) state.emplace(name, file.tensor(name));
        model->load_state_dict(state);
        model->eval();
        if (packed) {  // as the Translator does: oneDNN's kernels where they pay, sgemm elsewhere
            model->pack_weights(Precision::float32);
            REQUIRE(model->weights_packed() == packing_available(Precision::float32));
        }
        out.emplace_back(stem, model);
        sources.push_back(file.int_tensor("input.src"));
    }
    return out;
}

struct Line {
    std::string key;  // fixture, search, row, rank
    bool finished = false;
    double log_prob = 0, score = 0;
    std::vector<int64_t> tokens;
};

std::vector<Line> decode_all(bool packed = false) {
    std::vector<IntTensor> sources;
    const auto models = parity_models(sources, packed);
    std::vector<Line> lines;
    for (size_t m = 0; m < models.size(); ++m) {
        for (const Search& search : searches()) {
            const auto lists = search.options.beam_size == 1
                                   ? std::vector<std::vector<Hypothesis>>{}
                                   : beam_search_nbest(*models[m].second, sources[m], search.options, search.nbest);
            std::vector<std::vector<Hypothesis>> per_row = lists;
            if (search.options.beam_size == 1)
                for (Hypothesis& h : greedy_decode(*models[m].second, sources[m], search.options.max_len))
                    per_row.push_back({h});
            for (size_t row = 0; row < per_row.size(); ++row)
                for (size_t rank = 0; rank < per_row[row].size(); ++rank) {
                    const Hypothesis& h = per_row[row][rank];
                    std::ostringstream key;
                    key << models[m].first << " " << search.name << " " << row << " " << rank;
                    lines.push_back({key.str(), h.finished, h.log_prob, h.score, h.tokens});
                }
        }
    }
    return lines;
}

std::string format(const Line& line) {
    std::ostringstream out;
    out << line.key << " " << line.finished << " " << std::setprecision(9) << line.log_prob << " " << line.score
        << " :";
    for (int64_t t : line.tokens) out << " " << t;
    return out.str();
}

Line parse(const std::string& text) {
    std::istringstream in(text);
    std::string fixture, search, row, rank, colon;
    Line line;
    in >> fixture >> search >> row >> rank >> line.finished >> line.log_prob >> line.score >> colon;
    REQUIRE((in && colon == ":"));
    line.key = fixture + " " + search + " " + row + " " + rank;
    for (int64_t t; in >> t;) line.tokens.push_back(t);
    return line;
}

}  // namespace

std::vector<Line> recorded_lines() {
    std::ifstream in(kGoldenPath);
    REQUIRE(in.good());
    std::vector<Line> recorded;
    for (std::string text; std::getline(in, text);)
        if (!text.empty() && text[0] != '#') recorded.push_back(parse(text));
    return recorded;
}

void require_recorded(const std::vector<Line>& now) {
    const std::vector<Line> recorded = recorded_lines();
    // Every model kind and every search is covered, with ended and cut-off hypotheses among them.
    REQUIRE(recorded.size() == now.size());
    int finished = 0, cut_off = 0;
    for (size_t i = 0; i < now.size(); ++i) {
        INFO("recorded: " << format(recorded[i]) << "\nnow:      " << format(now[i]));
        REQUIRE(now[i].key == recorded[i].key);
        CHECK(now[i].tokens == recorded[i].tokens);
        CHECK(now[i].finished == recorded[i].finished);
        CHECK(std::abs(now[i].log_prob - recorded[i].log_prob) <= 1e-4 + 1e-5 * std::abs(recorded[i].log_prob));
        CHECK(std::abs(now[i].score - recorded[i].score) <= 1e-4 + 1e-5 * std::abs(recorded[i].score));
        (recorded[i].finished ? finished : cut_off)++;
    }
    CHECK(finished > 0);
    CHECK(cut_off > 0);
}

TEST_CASE("decoding the parity models finds the recorded hypotheses", "[decoding][golden]") {
    const std::vector<Line> now = decode_all();
    if (std::getenv("SEQGRAD_WRITE_DECODING_GOLDEN")) {
        std::ofstream out(kGoldenPath);
        out << "# tests/test_decoding_golden.cpp: fixture search row rank finished log_prob score : tokens\n";
        for (const Line& line : now) out << format(line) << "\n";
        out.close();
        REQUIRE(out.good());
        FAIL("wrote " << kGoldenPath << " (" << now.size() << " hypotheses); run again without "
                      << "SEQGRAD_WRITE_DECODING_GOLDEN to compare");
    }
    require_recorded(now);
}

// The Translator packs the weights (float32) for oneDNN's kernels where they pay (AVX-512) and
// leaves them on sgemm elsewhere: the same hypotheses either way. The first test runs the path of
// this machine (its output names it), the second the fallback, on every machine.
TEST_CASE("decoding with float32 weights packed as this machine packs them finds the recorded hypotheses",
          "[decoding][golden][packed]") {
    require_recorded(decode_all(/*packed=*/true));
}

TEST_CASE("decoding where packing is unavailable stays on sgemm and finds the recorded hypotheses",
          "[decoding][golden][packed]") {
    const testing::PackingDisabled off;
    require_recorded(decode_all(/*packed=*/true));
}
