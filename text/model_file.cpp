// Model files: a model's state_dict with its config, tokenizers, vocabularies and task in the
// metadata (model_file.h).
#include "seqgrad/text/model_file.h"

#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "seqgrad/core/random.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/registry.h"

namespace seqgrad::text {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFormat = "seqgrad-model-1";

// The tokenizers of a file written before model files held them: only the G2P task and the
// synthetic ones (copy, reverse, sort) wrote such files, and these are the tokenizers they read
// their two sides with (as a new run of them still does, training/task.cpp).
std::pair<Tokenizer, Tokenizer> older_tokenizers(const std::string& task) {
    if (task == "g2p") return {Tokenizer::characters(/*lowercase=*/true), Tokenizer::spaces()};
    check(task == "copy" || task == "reverse" || task == "sort", "checkpoint", "the file lacks its tokenizers");
    return {Tokenizer::characters(), Tokenizer::characters()};
}

// A classifier's labels: a JSON array of distinct, non-empty strings, one per class.
std::vector<std::string> labels_from_json(const std::string& text) {
    const char* op = "checkpoint";
    const internal::Json parsed = internal::parse_json(text, op);
    check(parsed.is_array() && !parsed.empty(), op, "metadata \"labels\" is not a JSON array of labels");
    std::vector<std::string> labels;
    std::set<std::string> seen;
    for (const internal::Json& label : parsed) {
        check(label.is_string() && !label.get<std::string>().empty(), op, "metadata \"labels\" holds ", label.dump(),
              ", not a label");
        check(seen.insert(label.get<std::string>()).second, op, "metadata \"labels\" names ", label.dump(), " twice");
        labels.push_back(label.get<std::string>());
    }
    return labels;
}

}  // namespace

std::string weights_to_use(const std::string& checkpoint) {
    std::error_code ec;
    if (!fs::is_directory(checkpoint, ec)) return checkpoint;
    const std::string best = (fs::path(checkpoint) / kBestFile).string();
    return fs::exists(best, ec) ? best : (fs::path(checkpoint) / kModelFile).string();
}

void save_model(const std::string& path, const models::Model& model, const TextSides& sides, const std::string& task,
                int64_t step) {
    SafetensorsFile file;
    file.set_metadata("format", kModelFormat);
    file.set_metadata("config", model.config().to_json());
    file.set_metadata("source_tokenizer", sides.source_tokenizer.to_json());
    file.set_metadata("target_tokenizer", sides.target_tokenizer.to_json());
    file.set_metadata("source_vocab", sides.source_vocab.to_json());
    file.set_metadata("target_vocab", sides.target_vocab.to_json());
    if (!sides.labels.empty()) file.set_metadata("labels", internal::Json(sides.labels).dump());
    file.set_metadata("task", task);
    file.set_metadata("step", std::to_string(step));
    for (const auto& [name, tensor] : model.state_dict()) file.put(name, tensor);
    file.save(path);
}

LoadedModel load_model(const std::string& path) {
    std::error_code ec;
    check(fs::exists(path, ec), "checkpoint", "no checkpoint at ", path);
    const std::string file_path = weights_to_use(path);
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
        if (file.metadata().count("labels")) loaded.labels = labels_from_json(file.metadata("labels"));
        loaded.step = std::stoll(file.metadata("step"));
        if (file.metadata().count("source_tokenizer") && file.metadata().count("target_tokenizer")) {
            loaded.source_tokenizer = Tokenizer::from_json(file.metadata("source_tokenizer"));
            loaded.target_tokenizer = Tokenizer::from_json(file.metadata("target_tokenizer"));
        } else {  // a file from before tokenizers were stored: its task's
            check(loaded.task != "corpus", "checkpoint",
                  "the file lacks its tokenizers (metadata \"source_tokenizer\", "
                  "\"target_tokenizer\")");
            std::tie(loaded.source_tokenizer, loaded.target_tokenizer) = older_tokenizers(loaded.task);
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
        const auto* encoder = dynamic_cast<const models::EncoderModel*>(loaded.model.get());
        const int64_t classes = encoder ? encoder->classes() : 0;
        check(loaded.labels.empty() || classes == static_cast<int64_t>(loaded.labels.size()), "checkpoint",
              "the file names ", loaded.labels.size(), " labels but its model has ", classes, " classes");
        loaded.model->eval();
        return loaded;
    } catch (const std::invalid_argument&) {
        throw Error(file_path + ": metadata \"step\" is not a number");
    } catch (const Error& e) {
        throw Error(file_path + ": " + e.what());
    }
}

}  // namespace seqgrad::text
