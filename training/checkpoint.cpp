// Model files (state_dict tensors with the config, vocabularies and task in the metadata) and the
// training state beside them (checkpoint.h).
#include "seqgrad/training/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <variant>

#include "seqgrad/core/files.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/task.h"

namespace seqgrad::training {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFormat = "seqgrad-model-1";
constexpr const char* kTrainingFormat = "seqgrad-training-1";

}  // namespace

// ---- the directory ----

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kBestFile = "best.safetensors";
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
std::string CheckpointDir::model_file() const { return file(kModelFile); }
std::string CheckpointDir::best_file() const { return file(kBestFile); }
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

std::string CheckpointDir::weights_to_use(const std::string& checkpoint) {
    const CheckpointDir dir(checkpoint);
    if (!dir.exists()) return checkpoint;
    std::error_code ec;
    return fs::exists(dir.best_file(), ec) ? dir.best_file() : dir.model_file();
}

void CheckpointDir::remove_leftovers() const {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(path_, ec)) {
        const std::string name = entry.path().filename().string();
        const bool ours = name.starts_with(kModelFile) || name.starts_with(kBestFile) ||
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

// ---- model files ----

void save_model(const std::string& path, const models::Model& model, const TextSides& sides, const std::string& task,
                int64_t step) {
    SafetensorsFile file;
    file.set_metadata("format", kModelFormat);
    file.set_metadata("config", model.config().to_json());
    file.set_metadata("source_tokenizer", sides.source_tokenizer.to_json());
    file.set_metadata("target_tokenizer", sides.target_tokenizer.to_json());
    file.set_metadata("source_vocab", sides.source_vocab.to_json());
    file.set_metadata("target_vocab", sides.target_vocab.to_json());
    file.set_metadata("task", task);
    file.set_metadata("step", std::to_string(step));
    for (const auto& [name, tensor] : model.state_dict()) file.put(name, tensor);
    file.save(path);
}

LoadedModel load_model(const std::string& path) {
    std::error_code ec;
    check(fs::exists(path, ec), "checkpoint", "no checkpoint at ", path);
    const std::string file_path = CheckpointDir::weights_to_use(path);
    check(fs::exists(file_path, ec), "checkpoint", path,
          " is a directory without model.safetensors or best.safetensors");
    const SafetensorsFile file = SafetensorsFile::load(file_path);
    try {
        check(file.metadata().count("format") && file.metadata("format") == kModelFormat, "checkpoint",
              "not a seqgrad model file (metadata \"format\" should be \"", kModelFormat, "\")");
        LoadedModel loaded;
        loaded.path = file_path;
        loaded.source_vocab = Vocabulary::from_json(file.metadata("source_vocab"));
        loaded.target_vocab = Vocabulary::from_json(file.metadata("target_vocab"));
        loaded.task = file.metadata("task");
        loaded.step = std::stoll(file.metadata("step"));
        if (file.metadata().count("source_tokenizer") && file.metadata().count("target_tokenizer")) {
            loaded.source_tokenizer = Tokenizer::from_json(file.metadata("source_tokenizer"));
            loaded.target_tokenizer = Tokenizer::from_json(file.metadata("target_tokenizer"));
        } else {  // a file from before tokenizers were stored: its task's
            check(loaded.task != "corpus", "checkpoint",
                  "the file lacks its tokenizers (metadata \"source_tokenizer\", "
                  "\"target_tokenizer\")");
            TrainingOptions options;
            options.task = loaded.task;
            const auto* older = dynamic_cast<const PairsTask*>(&task(options.task));
            check(older != nullptr, "checkpoint", "the file lacks its tokenizers");
            std::tie(loaded.source_tokenizer, loaded.target_tokenizer) = older->tokenizers(options);
        }
        const models::ModelConfig config = models::ModelConfig::from_json(file.metadata("config"));
        const auto [source_size, target_size] = models::vocabulary_sizes(config);
        check(target_size == loaded.target_vocab.size() &&
                  (!models::reads_source(config) || source_size == loaded.source_vocab.size()),
              "checkpoint", "the config's vocabulary sizes (", source_size, ", ", target_size,
              ") differ from the stored vocabularies (", loaded.source_vocab.size(), ", ", loaded.target_vocab.size(),
              ")");
        // The weights in the file must be what the config describes before the model is built: a
        // crafted config must not make us allocate a model the file cannot fill.
        int64_t stored = 0;
        for (const std::string& name : file.names()) stored += file.entry(name).shape.numel();
        const int64_t expected = models::model_kind(config.model).parameters(config);
        check(stored == expected, "checkpoint", "the config describes a model of ", expected,
              " parameters, but the file holds ", stored, " values");
        Generator gen(0);
        loaded.model = models::make_model(config, gen);
        std::map<std::string, Tensor> state;
        for (const std::string& name : file.names()) state.emplace(name, file.tensor(name));
        loaded.model->load_state_dict(state);
        loaded.model->eval();
        return loaded;
    } catch (const std::invalid_argument&) {
        throw Error(file_path + ": metadata \"step\" is not a number");
    } catch (const Error& e) {
        throw Error(file_path + ": " + e.what());
    }
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

// An evaluation is written with the keys of its kind. A text's has a loss; older files wrote every
// kind's keys in one object, with a loss of null for pairs, and read the same way.
internal::Json write_eval(const EvalResult& result) {
    return std::visit(
        [](const auto& r) {
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, PairScores>) return pair_scores_table().write(r);
        else return text_scores_table().write(r);
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
    if (json.contains("loss") && !json.at("loss").is_null())
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

}  // namespace seqgrad::training
