// `seqgrad eval`: a checkpoint's score on a split of its task or on a file, as its task measures it:
// WER and PER of the decoded outputs (and BLEU and chrF when asked), a language model's loss over a
// whole text, a masked language model's masked loss, or a classifier's accuracy, macro-F1, each
// class's measures and the confusion matrix (drawn with --out).
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "svg.h"
#include "decoding_flags.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/inference/text_classifier.h"
#include "seqgrad/text/ensemble.h"
#include "seqgrad/text/model_file.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/encoder_data.h"
#include "seqgrad/training/pairs.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/training/task.h"
#include "seqgrad/training/text_data.h"
#include "seqgrad/training/bleu_chrf.h"

namespace seqgrad::cli {
namespace {

struct EvalFlags : DecodingFlags {
    std::string text;     // a language model's: a text file to measure
    int64_t context = 0;  // its window (0: the model's context)
    std::string split = "dev";
    std::string dictionary;
    std::vector<std::string> test_files;
    std::vector<std::string> metrics;
    bool skip_invalid = false;
    std::string out;  // a classifier's confusion matrix, drawn
};

// The training options of the run that wrote the checkpoint (a run's directory, or a model file
// in one), for its task's data, or the defaults for the model's task.
training::TrainingOptions run_options(const std::string& checkpoint, const std::string& task) {
    std::error_code ec;
    const bool file = std::filesystem::is_regular_file(checkpoint, ec);
    const training::CheckpointDir dir(file ? std::filesystem::path(checkpoint).parent_path().string() : checkpoint);
    training::TrainingOptions options;
    if (dir.exists() && dir.has_training_state()) options = training::load_training_state(dir.training_file()).options;
    options.task = task;
    return options;
}

// A language model's loss over the whole of a text (its own validation text, or --text), in nats per
// token, as perplexity and as bits per character (or byte).
int eval_language_model(const EvalFlags& f, text::LoadedModel& loaded) {
    check(f.test_files.empty() && f.metrics.empty(), "eval", loaded.path,
          " holds a language model: --test and --metric are for models that translate (give --text)");
    check(f.split == "dev", "eval", "a language model's run has a validation text only; give --text for another");
    check(f.checkpoints.size() == 1, "eval", loaded.path, " holds a language model: its loss is one model's ",
          "(give one --checkpoint)");
    const int64_t context = loaded.model->max_decode_length();
    check(f.context <= context, "eval", "--context ", f.context, " is above the model's, ", context);
    training::TextData data;
    std::string what;
    if (!f.text.empty()) {
        training::EncodedText text = training::encode_text(f.text, loaded.target_tokenizer, loaded.target_vocab);
        check(text.ids.size() >= 2, "eval", f.text, ": the text has ", text.ids.size(),
              " tokens; a loss needs at least 2");
        data.dev_text = std::move(text.ids);
        data.dev_units = text.units;
        data.unit = text.unit;
        what = f.text;
    } else {
        training::TrainingOptions options = run_options(f.checkpoints.front(), loaded.task);
        training::DataRequest request;
        request.train = false;
        request.read_as(loaded);
        data = training::prepare_text(options, request);
        what = "the run's validation text";
    }
    const training::EvalResult r =
        data.evaluate(*loaded.model, training::Split::dev, 0, f.context > 0 ? f.context : context, {});
    std::printf("%s (%s, step %lld): %s\n", what.c_str(), loaded.path.c_str(), static_cast<long long>(loaded.step),
                data.evaluator().describe(r).c_str());
    return 0;
}

// The confusion matrix as a heatmap: each gold class's row, the share of its texts predicted as
// each class.
void draw_confusion(const std::string& path, const training::ClassificationScores& scores,
                    const std::vector<std::string>& labels, const std::string& title) {
    svg::HeatmapFigure figure;
    figure.title = title;
    figure.column_labels = figure.row_labels = labels;
    figure.column_axis = "predicted";
    figure.row_axis = "gold";
    figure.scale_label = "share of the gold class";
    svg::HeatmapPanel panel;
    for (int32_t gold = 0; gold < scores.class_count(); ++gold) {
        std::vector<double> row;
        const auto support = static_cast<double>(scores.classes[static_cast<size_t>(gold)].support);
        for (int32_t predicted = 0; predicted < scores.class_count(); ++predicted)
            row.push_back(support > 0 ? static_cast<double>(scores.confusion_at(gold, predicted)) / support : 0.0);
        panel.values.push_back(std::move(row));
    }
    figure.panels.push_back(std::move(panel));
    svg::write_file(path, svg::heatmap_svg(figure));
}

// An encoder: a classifier's measures on its run's dev or test texts or on --test, or a masked
// language model's masked loss over its run's validation text or --text.
int eval_encoder(const EvalFlags& f, text::LoadedModel& loaded) {
    check(f.checkpoints.size() == 1, "eval", loaded.path, " holds an encoder: give one --checkpoint");
    check(f.metrics.empty(), "eval", "--metric is for models that translate");
    training::TrainingOptions options = run_options(f.checkpoints.front(), loaded.task);
    options.skip_invalid = options.skip_invalid || f.skip_invalid;
    training::DataRequest request = training::request_for(loaded.model->config());
    request.train = false;
    request.test = f.split == "test";
    request.read_as(loaded);
    const std::string step = std::to_string(loaded.step);
    if (loaded.labels.empty()) {  // a masked language model
        check(f.test_files.empty() && f.out.empty(), "eval", loaded.path,
              " holds a masked language model: --test and --out are a classifier's (give --text)");
        check(f.split == "dev", "eval", "a masked language model's run has a validation text only; give --text");
        if (!f.text.empty()) options.text = options.val = f.text;  // measured whole
        check(!options.text.empty(), "eval", loaded.path,
              " has no run's options to find its validation text in: give --text");
        training::MaskedTextData data = training::prepare_masked_text(options, request);
        const training::EvalResult r =
            data.evaluate(*loaded.model, training::Split::dev, 0, request.max_target_length, {});
        std::printf("%s (%s, step %s): %s\n", f.text.empty() ? "the run's validation text" : f.text.c_str(),
                    loaded.path.c_str(), step.c_str(), data.evaluator().describe(r).c_str());
        return 0;
    }
    check(f.text.empty(), "eval", loaded.path, " holds a classifier: --text is for language models (give --test)");
    check(f.test_files.size() <= 1, "eval", "a classifier's --test is one file of labelled texts");
    const training::LabelSet labels(loaded.labels);
    check(labels.names() == loaded.labels, "eval", loaded.path, ": its labels are not in order");
    training::EncodedLabelled texts;
    bool pairs = false;
    std::string what;
    if (!f.test_files.empty()) {
        std::vector<std::string> report;
        const training::LabelledTexts read =
            training::read_labelled_file(f.test_files.front(), labels, 0, f.skip_invalid, &report);
        for (const std::string& line : report) std::fprintf(stderr, "%s\n", line.c_str());
        pairs = !read.second_texts.empty();
        texts =
            training::encode_labelled(read, loaded.target_tokenizer, loaded.target_vocab, request.max_source_length);
        what = f.test_files.front();
    } else {
        check(!options.train_files.empty(), "eval", loaded.path,
              " has no run's options to find its data in: give --test");
        training::ClassifyData data = training::prepare_classify(options, request);
        check(data.labels == loaded.labels, "eval", "the run's training file now has other labels than ", loaded.path,
              " was trained on");
        pairs = data.pairs;
        texts = std::move(f.split == "test" ? data.test : data.dev);
        what = loaded.task + " " + f.split;
    }
    check(texts.size() > 0, "eval", what, " has no texts to classify");
    const training::ClassificationScores scores =
        training::classification_scores_of(*loaded.model, texts, pairs, static_cast<int64_t>(loaded.labels.size()));
    std::printf("%s (%s, step %s): %lld texts\n%s", what.c_str(), loaded.path.c_str(), step.c_str(),
                static_cast<long long>(scores.examples), training::classification_table(scores, loaded.labels).c_str());
    std::fflush(stdout);
    if (!f.out.empty()) {
        draw_confusion(f.out, scores, loaded.labels, "confusion matrix: " + what);
        std::fprintf(stderr, "wrote %s\n", f.out.c_str());
    }
    return 0;
}

// "runs/a/best.safetensors, step 800", or for an ensemble each model's with its weight.
std::string models_read(const text::Ensemble& ensemble) {
    std::string text;
    for (size_t i = 0; i < ensemble.size(); ++i) {
        const text::LoadedModel& m = ensemble.member(i);
        if (i > 0) text += " + ";
        text += m.path + ", step " + std::to_string(m.step);
        if (ensemble.size() > 1) {
            char weight[32];
            std::snprintf(weight, sizeof weight, ", weight %.3g", ensemble.weights()[i]);
            text += weight;
        }
    }
    return text;
}

int run_eval(const EvalFlags& f) {
    if (f.threads > 0) set_num_threads(f.threads);
    check(f.split == "dev" || f.split == "test", "eval", "--split must be dev or test, got ", f.split);
    const models::DecodingOptions decoding = decoding_of(f);  // refused before any checkpoint is read
    std::vector<text::LoadedModel> models;
    for (const std::string& path : f.checkpoints) {
        models.push_back(text::load_model(path));
        if (models::family(models.back().model->config()) == models::Family::encoder)
            inference::prepare_encoder_weights(models.back(), precision_of(f));  // as TextClassifier's
        else models.back().model->pack_weights(precision_of(f));
    }
    const models::Family family = models::family(models.front().model->config());
    if (family == models::Family::encoder) return eval_encoder(f, models.front());
    check(f.out.empty(), "eval", "--out draws a classifier's confusion matrix");
    if (family == models::Family::language_model) return eval_language_model(f, models.front());
    // Several checkpoints decode together; the first one's run names the data and its tokenizers
    // read it.
    text::Ensemble ensemble(std::move(models), f.weights);
    const text::LoadedModel& loaded = ensemble.first();
    check(f.text.empty(), "eval", loaded.path, " holds a model that translates: --text is for language models ",
          "(give --test pairs)");
    std::vector<training::Example> examples;
    std::string what;
    if (!f.test_files.empty()) {
        std::vector<std::string> report;
        examples = training::read_examples(f.test_files, loaded.source_tokenizer, loaded.target_tokenizer,
                                           f.skip_invalid, &report);
        for (const std::string& line : report) std::fprintf(stderr, "%s\n", line.c_str());
        what = training::corpus_name(f.test_files);
    } else {
        training::TrainingOptions options = run_options(f.checkpoints.front(), loaded.task);
        if (!f.dictionary.empty()) options.dictionary = f.dictionary;
        options.skip_invalid = options.skip_invalid || f.skip_invalid;
        training::DataRequest request;
        request.train = false;
        request.test = f.split == "test";
        request.read_as(loaded);
        training::PairData data = training::prepare_pairs(options, request);
        examples = std::move(f.split == "test" ? data.test : data.dev);
        what = loaded.task + " " + f.split;
    }
    check(!examples.empty(), "eval", what, " has no examples to evaluate");
    std::vector<std::vector<std::string>> predictions;
    training::PairScores r = training::evaluate(ensemble, examples, decoding, &predictions);
    training::score_texts(r, f.metrics, predictions, examples, loaded.target_tokenizer);
    std::printf("%s (%s, beam %lld): %s\n", what.c_str(), models_read(ensemble).c_str(),
                static_cast<long long>(decoding.beam_size), training::pair_evaluator("wer")->describe(r).c_str());
    return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_status) {
    auto f = std::make_shared<EvalFlags>();
    CLI::App* cmd = app.add_subcommand("eval", "A checkpoint's score on a split or a file: sequence and token error "
                                               "rates (WER, PER), a language model's loss, perplexity and bits "
                                               "per character, a masked model's masked loss, or a classifier's "
                                               "accuracy, F1 and confusion matrix");
    add_decoding_flags(cmd, *f, {"beam_size", "length_penalty", "max_len"});
    cmd->add_option("--split", f->split, "dev or test (of the run's own data)")->capture_default_str();
    cmd->add_option("--test", f->test_files,
                    "Evaluate on these pairs instead: one TSV file, or a source and a target file (a classifier: "
                    "one file of labelled texts)")
        ->expected(1, 2);
    cmd->add_option("--out", f->out, "A classifier: draw the confusion matrix in this SVG file");
    cmd->add_option("--metric", f->metrics, "Also bleu and/or chrf (sacreBLEU's definitions), for sentence targets")
        ->check(CLI::IsMember({"bleu", "chrf"}));
    cmd->add_flag("--skip-invalid", f->skip_invalid,
                  "Evaluate the valid lines and count the others, instead of refusing");
    cmd->add_option("--dictionary", f->dictionary, "The CMUdict file for g2p");
    cmd->add_option("--text", f->text,
                    "A language model or masked language model: measure this text (plain or gzip) instead of its own");
    cmd->add_option("--context", f->context, "A language model: the window it reads (default: its context)")
        ->check(kPositive);
    cmd->callback([f, &exit_status] { exit_status = run_eval(*f); });
}

}  // namespace seqgrad::cli
