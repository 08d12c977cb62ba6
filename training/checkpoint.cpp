// A run's checkpoint directory: its file names, the training state beside the model files
// (text/model_file.h), and checkpoints averaged into a new one (checkpoint.h).
#include "seqgrad/training/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <variant>

#include "seqgrad/core/files.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/text/ensemble.h"
#include "seqgrad/text/model_file.h"

namespace seqgrad::training {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTrainingFormat = "seqgrad-training-1";

}  // namespace

// ---- the directory ----

namespace {

constexpr const char* kTrainingFile = "training.safetensors";
constexpr const char* kKeptPrefix = "step-";
constexpr const char* kKeptSuffix = ".safetensors";

bool is_kept_name(const std::string& name) {
    const size_t first = std::strlen(kKeptPrefix), suffix = std::strlen(kKeptSuffix);
    if (name.size() <= first + suffix || !name.starts_with(kKeptPrefix) || !name.ends_with(kKeptSuffix)) return false;
    return name.find_first_not_of("0123456789", first) == name.size() - suffix;
}

}  // namespace

std::string CheckpointDir::file(const char* name) const { return (fs::path(path_) / name).string(); }
std::string CheckpointDir::model_file() const { return file(text::kModelFile); }
std::string CheckpointDir::best_file() const { return file(text::kBestFile); }
std::string CheckpointDir::training_file() const { return file(kTrainingFile); }

std::string CheckpointDir::kept_file(int64_t step) const {
    char name[64];
    std::snprintf(name, sizeof name, "%s%09lld%s", kKeptPrefix, static_cast<long long>(step), kKeptSuffix);
    return file(name);
}

std::vector<std::string> CheckpointDir::kept_files() const {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path_, ec))
        if (is_kept_name(entry.path().filename().string())) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());  // zero-padded steps: by name is by step
    return files;
}

void CheckpointDir::prune_kept(int64_t keep) const {
    const std::vector<std::string> files = kept_files();
    std::error_code ec;
    for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 0)) < files.size(); ++i)
        fs::remove(files[i], ec);
}

bool CheckpointDir::exists() const {
    std::error_code ec;
    return fs::is_directory(path_, ec);
}

bool CheckpointDir::has_model() const {
    std::error_code ec;
    return fs::exists(model_file(), ec);
}

bool CheckpointDir::has_training_state() const {
    std::error_code ec;
    return fs::exists(training_file(), ec);
}

void CheckpointDir::remove_leftovers() const {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path_, ec)) {
        const std::string name = entry.path().filename().string();
        const bool ours = name.starts_with(text::kModelFile) || name.starts_with(text::kBestFile) ||
                          name.starts_with(kTrainingFile) || name.starts_with(kKeptPrefix);
        const bool leftover = name.ends_with(pending("")) || name.find(".tmp.") != std::string::npos;
        if (ours && leftover) fs::remove(entry.path(), ec);
    }
}

void CheckpointDir::commit_pending() const {
    // The training state first: it holds the weights too, so that a process killed between the
    // two renames resumes from it alone.
    for (const std::string& path : {training_file(), model_file()}) {
        std::error_code ec;
        fs::rename(pending(path), path, ec);
        check(!ec, "checkpoint", "cannot rename ", pending(path), " to ", path, ": ", ec.message());
    }
    sync_directory(path_);
}

void CheckpointDir::discard_pending() const {
    std::error_code ec;
    for (const std::string& path : {training_file(), model_file()}) fs::remove(pending(path), ec);
}

// ---- the training state ----

namespace {

using internal::OptionTable;

const OptionTable<PairScores>& pair_scores_table() {
    static const OptionTable<PairScores> table = OptionTable<PairScores>("evaluation")
                                                     .add("wer", "word (sequence) error rate, %", &PairScores::wer)
                                                     .add("per", "phone (token) error rate, %", &PairScores::per)
                                                     .add("words", "examples scored", &PairScores::words)
                                                     .add("bleu", "BLEU, when measured", &PairScores::bleu)
                                                     .add("chrf", "chrF, when measured", &PairScores::chrf);
    return table;
}

const OptionTable<TextScores>& text_scores_table() {
    static const OptionTable<TextScores> table =
        OptionTable<TextScores>("evaluation")
            .add("loss", "mean loss per token, nats", &TextScores::loss)
            .add("tokens", "tokens predicted", &TextScores::tokens)
            .add("units", "characters or bytes of the text", &TextScores::units)
            .add("unit", "character or byte", &TextScores::unit);
    return table;
}

const OptionTable<MaskedScores>& masked_scores_table() {
    static const OptionTable<MaskedScores> table =
        OptionTable<MaskedScores>("evaluation")
            .add("loss", "mean loss per masked token, nats", &MaskedScores::loss)
            .add("accuracy", "masked tokens predicted right, %", &MaskedScores::accuracy)
            .add("masked", "masked tokens predicted", &MaskedScores::masked);
    return table;
}

const OptionTable<ClassifierScores>& class_scores_table() {
    static const OptionTable<ClassifierScores> table =
        OptionTable<ClassifierScores>("evaluation")
            .add("accuracy", "texts classified right, %", &ClassifierScores::accuracy)
            .add("macro_f1", "the mean of the classes' F1, %", &ClassifierScores::macro_f1)
            .add("texts", "texts classified", &ClassifierScores::texts);
    return table;
}

// An evaluation is written with the keys of its kind, which tell it apart: a text's has a loss and
// units, a masked model's a loss and "masked", a classifier's "macro_f1". Older files wrote the keys
// of pairs and of a text in one object, with a loss of null for pairs, and read the same way.
internal::Json write_eval(const EvalResult& result) {
    return std::visit(
        [](const auto& r) {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, PairScores>) return pair_scores_table().write(r);
        else if constexpr (std::is_same_v<R, TextScores>) return text_scores_table().write(r);
        else if constexpr (std::is_same_v<R, MaskedScores>) return masked_scores_table().write(r);
        else return class_scores_table().write(r);
        },
        result);
}

void read_eval(const internal::Json& json, EvalResult& result) {
    // The other kind's keys (an older file's) are passed over; any other key is an Error.
    const auto read = [&](const auto& table, const auto& other, auto scores) {
        std::vector<std::string> ignored;
        table.read(json, scores, {.strict = false, .ignored = &ignored, .complete = true});
        for (const std::string& key : ignored) check(other.has(key), table.what().c_str(), "unknown key \"", key, "\"");
        result = scores;
    };
    if (json.contains("masked")) read(masked_scores_table(), masked_scores_table(), MaskedScores{});
    else if (json.contains("macro_f1")) read(class_scores_table(), class_scores_table(), ClassifierScores{});
    else if (json.contains("loss") && !json.at("loss").is_null())
        read(text_scores_table(), pair_scores_table(), TextScores{});
    else read(pair_scores_table(), text_scores_table(), PairScores{});
}

const OptionTable<HistoryEntry>& history_table() {
    using H = HistoryEntry;
    static const OptionTable<H> table =
        OptionTable<H>("history entry")
            .add("step", "optimizer steps", &H::step)
            .required()
            .add("epoch", "epochs finished", &H::epoch)
            .required()
            .add("minutes", "training time, all sessions", &H::minutes)
            .required()
            .add("train_loss", "mean loss since the previous entry", &H::train_loss)
            .required()
            .custom<EvalResult>("dev", "the dev evaluation", write_eval, read_eval, &H::dev)
            .required();
    return table;
}

const OptionTable<Progress>& progress_table() {
    using P = Progress;
    static const OptionTable<P> table =
        OptionTable<P>("progress")
            .add("step", "optimizer steps taken", &P::step)
            .required()
            .add("epoch", "epochs finished", &P::stream, &BatchStreamState::epoch)
            .required()
            .add("next_batch", "batches of this epoch handed out", &P::stream, &BatchStreamState::next_batch)
            .required()
            .add("random", "the model generator's state", &P::random)
            .required()
            .add("seconds", "training time, all sessions", &P::seconds)
            .required()
            .add("has_best", "whether best_dev holds an evaluation", &P::has_best)
            .required()
            .custom<EvalResult>("best_dev", "the best dev evaluation", write_eval, read_eval, &P::best_dev)
            .required()
            .custom<EvalResult>("last_dev", "the latest dev evaluation", write_eval, read_eval, &P::last_dev)
            .required()
            .add("loss_sum", "losses since the last history entry", &P::loss_sum)
            .required()
            .add("loss_steps", "steps since the last history entry", &P::loss_steps)
            .required()
            // These two are absent in checkpoints from before lr_decay: their defaults apply.
            .add("lr_scale", "lr_decay's factors so far", &P::lr_scale)
            .add("scheduled_best", "the best score of the scheduled evaluations (-1: none)", &P::scheduled_best)
            // Absent before the cosine could run over the budget.
            .add("schedule_position", "a cosine over the budget: where it is, 0 to 1", &P::schedule_position)
            .list("history", "every dev evaluation", history_table(), &P::history)
            .required();
    return table;
}

}  // namespace

std::string Progress::to_json() const { return progress_table().write(*this).dump(); }

Progress Progress::from_json(const std::string& text) {
    internal::Json json = internal::parse_json(text, "progress");
    // Before tasks had metrics of their own the best score was a WER, and its key said so.
    if (json.is_object() && json.contains("scheduled_best_wer")) {
        if (!json.contains("scheduled_best")) json["scheduled_best"] = json.at("scheduled_best_wer");
        json.erase("scheduled_best_wer");
    }
    Progress progress;
    progress_table().read(json, progress);
    return progress;
}

void save_training_state(const std::string& path, const TrainingOptions& options, const Progress& progress,
                         const std::map<std::string, Tensor>& state) {
    SafetensorsFile training;
    training.set_metadata("format", kTrainingFormat);
    training.set_metadata("training", options.to_json());
    training.set_metadata("progress", progress.to_json());
    training.set_metadata("step", std::to_string(progress.step));
    for (const auto& [name, tensor] : state) training.put(name, tensor);
    training.save(path);
}

TrainingState load_training_state(const std::string& path) {
    const SafetensorsFile file = SafetensorsFile::load(path);
    TrainingState state;
    try {
        state.options = TrainingOptions::from_json(file.metadata("training"));
    } catch (const Error& e) {
        throw Error(path + ": metadata \"training\": " + e.what());
    }
    try {
        state.progress = Progress::from_json(file.metadata("progress"));
    } catch (const Error& e) {
        throw Error(path + ": metadata \"progress\" is damaged: " + e.what());
    }
    for (const std::string& name : file.names()) {
        if (name.starts_with(kWeightsPrefix))
            state.weights.emplace(name.substr(std::strlen(kWeightsPrefix)), file.tensor(name));
        else (name.starts_with("average") ? state.average : state.optimizer).emplace(name, file.tensor(name));
    }
    return state;
}

// ---- averaging ----

void write_averaged_checkpoint(const std::vector<std::string>& files, const std::string& training_from,
                               const std::string& out) {
    const text::LoadedModel mean = text::average_models(files);
    const CheckpointDir dir(out);
    std::error_code ec;
    check(!dir.has_model() && !dir.has_training_state() && !fs::exists(dir.best_file(), ec), "average", out,
          " holds a checkpoint already: give a new directory");
    fs::create_directories(out, ec);
    check(!ec && dir.exists(), "average", "cannot create ", out, ec ? ": " + ec.message() : "");
    const CheckpointDir from(training_from);
    if (!training_from.empty() && from.has_training_state()) {
        TrainingState state = load_training_state(from.training_file());
        std::map<std::string, Tensor> tensors = std::move(state.optimizer);
        tensors.merge(state.average);
        // The weights, and a run's moving average (which its evaluations, and so its kept weights,
        // read), are both the mean.
        for (const auto& [name, tensor] : mean.model->state_dict()) {
            tensors.emplace(kWeightsPrefix + name, tensor);
            if (const auto average = tensors.find("average." + name); average != tensors.end())
                average->second = tensor;
        }
        save_training_state(dir.training_file(), state.options, state.progress, tensors);
    }
    text::save_model(dir.model_file(), *mean.model, mean, mean.task, mean.step);
}

}  // namespace seqgrad::training
