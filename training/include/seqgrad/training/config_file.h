// A run's config file, as `seqgrad train --config` and `seqgrad summary --config` read it: a JSON
// object of model keys (docs/parity.md), "model" among them or not, and an optional "training"
// object of training options (options.h).
#pragma once

#include <string>

#include "seqgrad/models/model.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

class ConfigFile {
public:
    // Reads `path`; an Error names it when it cannot be read or is not a JSON object.
    static ConfigFile read(const std::string& path);

    const std::string& path() const { return path_; }
    // The model the file names, or "" if it names none.
    const std::string& model() const { return model_; }
    // The file's model keys over `config` (the file's keys must be the kind's); an Error names
    // the file and the key.
    void apply_model_keys(models::ModelConfig& config) const;
    bool has_training() const { return !training_.empty(); }
    // Whether its "training" object gives `key`.
    bool training_sets(const std::string& key) const;
    // The file's "training" keys over `base` (the defaults, unless given); an Error names the file
    // and the key.
    TrainingOptions training(const TrainingOptions& base = {}) const;

private:
    std::string path_, model_, model_keys_, training_;
};

}  // namespace seqgrad::training
