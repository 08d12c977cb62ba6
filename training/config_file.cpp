// A run's config file (config_file.h).
#include "seqgrad/training/config_file.h"

#include "seqgrad/internal/option_table.h"
#include "seqgrad/text/utf8.h"

namespace seqgrad::training {

ConfigFile ConfigFile::read(const std::string& path) {
    internal::Json json = internal::parse_json(text::read_file(path), path);
    check(json.is_object(), "config", path, " is not a JSON object");
    ConfigFile file;
    file.path_ = path;
    if (json.contains("training")) {
        file.training_ = json.at("training").dump();
        json.erase("training");
    }
    if (json.contains("model")) {
        check(json.at("model").is_string(), "config", path, ": \"model\" must be a string, got ",
              json.at("model").dump());
        file.model_ = json.at("model").get<std::string>();
    }
    file.model_keys_ = json.dump();
    return file;
}

void ConfigFile::apply_model_keys(models::ModelConfig& config) const {
    check(model_.empty() || model_ == config.model, "config", path_, " describes model ", model_, " but the run's is ",
          config.model);
    try {
        config.update_from_json(model_keys_);
    } catch (const Error& e) {
        throw Error(path_ + ": " + e.what());
    }
}

bool ConfigFile::training_sets(const std::string& key) const {
    return !training_.empty() && internal::parse_json(training_, path_).contains(key);
}

TrainingOptions ConfigFile::training(const TrainingOptions& base) const {
    TrainingOptions options = base;
    if (training_.empty()) return options;
    try {
        options.update_from_json(training_);
    } catch (const Error& e) {
        throw Error(path_ + ": " + e.what());
    }
    return options;
}

}  // namespace seqgrad::training
