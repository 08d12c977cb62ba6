// `seqgrad score --predictions P.tsv --references R.tsv`: the error rates (and BLEU and chrF when
// asked) of predictions from anywhere, scored as `eval` scores a checkpoint's, so that other systems
// and baselines stand beside seqgrad's on the same metrics.
#include <cstdio>
#include <unordered_map>

#include "commands.h"
#include "seqgrad/core/error.h"
#include "seqgrad/text/tokenizer.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/line_reader.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/training/error_rates.h"
#include "seqgrad/training/bleu_chrf.h"

namespace seqgrad::cli {
namespace {

struct ScoreFlags {
    std::string predictions;
    std::vector<std::string> references;
    std::string tokens = "space";
    std::string split;  // only the references in this carved split
    std::vector<std::string> metrics;
};

int run_score(const ScoreFlags& f) {
    const text::Tokenizer tokenizer = f.tokens == "char" ? text::Tokenizer::characters() : text::Tokenizer::spaces();
    std::vector<training::Example> examples =
        training::read_examples(f.references, text::Tokenizer::characters(), tokenizer);
    if (!f.split.empty())
        std::erase_if(examples, [&](const training::Example& e) {
            return training::split_name(training::split_by_hash(e.name)) != f.split;
        });
    check(!examples.empty(), "score", training::corpus_name(f.references), " has no pairs",
          f.split.empty() ? "" : " in the " + f.split + " split");

    // source -> prediction, from lines "source<TAB>prediction" (the prediction may be empty).
    std::unordered_map<std::string, std::string> predicted;
    training::LineReader reader(f.predictions);
    for (std::string line; reader.next(line);) {
        const size_t tab = line.find('\t');
        check(tab != std::string::npos, "score", f.predictions, ":", reader.line_number(),
              ": expected source<TAB>prediction");
        predicted.emplace(line.substr(0, tab), line.substr(tab + 1));
    }
    training::ErrorRates rates;
    std::vector<std::string> hypotheses;
    std::vector<std::vector<std::string>> references;
    for (const training::Example& e : examples) {
        const auto found = predicted.find(e.name);
        check(found != predicted.end(), "score", f.predictions, " has no prediction for \"", e.name, "\"");
        rates.add(tokenizer.tokenize(found->second), e.references);
        hypotheses.push_back(found->second);
        references.push_back(e.reference_texts);
    }
    std::printf("%s: WER %.2f%%  PER %.2f%%  (%lld words)", f.predictions.c_str(), rates.wer(), rates.per(),
                static_cast<long long>(rates.words()));
    for (const std::string& metric : f.metrics) {
        if (metric == "bleu") std::printf("  BLEU %.2f", training::corpus_bleu(hypotheses, references).score);
        else std::printf("  chrF %.2f", training::corpus_chrf(hypotheses, references));
    }
    std::printf("\n");
    return 0;
}

}  // namespace

void add_score_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<ScoreFlags>();
    CLI::App* cmd = app.add_subcommand("score", "Score predictions from anywhere against references, as eval does");
    cmd->add_option("--predictions", f->predictions, "Lines of source<TAB>prediction (what predict prints)")
        ->required();
    cmd->add_option("--references", f->references, "The pairs: one TSV file, or a source and a target file")
        ->required()
        ->expected(1, 2);
    cmd->add_option("--tokens", f->tokens, "How predictions and references split into tokens for WER and PER")
        ->capture_default_str()
        ->check(CLI::IsMember({"space", "char"}));
    cmd->add_option("--split", f->split,
                    "Only the references of this split as training carves it from one file (train, dev or test)")
        ->check(CLI::IsMember({"train", "dev", "test"}));
    cmd->add_option("--metric", f->metrics, "Also bleu and/or chrf")->check(CLI::IsMember({"bleu", "chrf"}));
    cmd->callback([f, &exit_status] { exit_status = run_score(*f); });
}

}  // namespace seqgrad::cli
