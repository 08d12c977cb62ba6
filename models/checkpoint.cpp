// Model files: state_dict tensors plus the config, vocabularies and task in the metadata.
#include "seqgrad/models/checkpoint.h"

#include <filesystem>

namespace seqgrad::models {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "seqgrad-model-1";
}

void save_model(const std::string& path, const Seq2SeqModel& model, const Vocabulary& source_vocab,
                const Vocabulary& target_vocab, const std::string& task, int64_t step) {
    SafetensorsFile file;
    file.set_metadata("format", kFormat);
    file.set_metadata("config", model.config().to_json());
    file.set_metadata("source_vocab", source_vocab.to_json());
    file.set_metadata("target_vocab", target_vocab.to_json());
    file.set_metadata("task", task);
    file.set_metadata("step", std::to_string(step));
    for (const auto& [name, tensor] : model.state_dict()) file.put(name, tensor);
    file.save(path);
}

std::string model_file_of(const std::string& checkpoint) {
    std::error_code ec;
    if (!fs::is_directory(checkpoint, ec)) return checkpoint;
    const fs::path best = fs::path(checkpoint) / "best.safetensors";
    if (fs::exists(best, ec)) return best.string();
    return (fs::path(checkpoint) / "model.safetensors").string();
}

LoadedModel load_model(const std::string& path) {
    std::error_code ec;
    check(fs::exists(path, ec), "checkpoint", "no checkpoint at ", path);
    const std::string file_path = model_file_of(path);
    check(fs::exists(file_path, ec), "checkpoint", path, " is a directory without model.safetensors or best.safetensors");
    const SafetensorsFile file = SafetensorsFile::load(file_path);
    try {
        check(file.metadata().count("format") && file.metadata("format") == kFormat, "checkpoint",
              "not a seqgrad model file (metadata \"format\" should be \"", kFormat, "\")");
        LoadedModel loaded;
        loaded.path = file_path;
        loaded.source_vocab = Vocabulary::from_json(file.metadata("source_vocab"));
        loaded.target_vocab = Vocabulary::from_json(file.metadata("target_vocab"));
        loaded.task = file.metadata("task");
        loaded.step = std::stoll(file.metadata("step"));
        const ModelConfig config = ModelConfig::from_json(file.metadata("config"));
        check(config.src_vocab == loaded.source_vocab.size() && config.tgt_vocab == loaded.target_vocab.size(),
              "checkpoint", "the config's vocabulary sizes (", config.src_vocab, ", ", config.tgt_vocab,
              ") differ from the stored vocabularies (", loaded.source_vocab.size(), ", ", loaded.target_vocab.size(), ")");
        Generator gen(0);
        loaded.model = make_model(config, gen);
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

}  // namespace seqgrad::models
