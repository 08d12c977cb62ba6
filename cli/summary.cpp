// `seqgrad summary --model M [--config F.json]`: builds the model, runs one forward pass over a
// dummy batch with tracing on, and prints every layer's output shape and parameter count
// (models/summary.h).
#include <cstdio>
#include <optional>

#include "commands.h"
#include "option_flags.h"
#include "seqgrad/core/error.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/summary.h"
#include "seqgrad/training/config_file.h"

namespace seqgrad::cli {
namespace {

struct SummaryFlags {
    std::string model;
    std::string config_file;
    models::SummaryOptions shapes;
    bool every_layer = false;
    GivenOptions model_keys;
};

// The defaults for the model, with a config file's model keys over them (a key it leaves out, such
// as the vocabulary sizes, which training takes from the data, keeps its default), then the model
// keys given as flags. The file's "training" object is checked (an unknown key or a value out of
// range is an error, as `train` would find it) and changes nothing here.
models::ModelConfig config_of(const SummaryFlags& flags) {
    std::string model = flags.model;
    std::optional<training::ConfigFile> file;
    if (!flags.config_file.empty()) {
        file = training::ConfigFile::read(flags.config_file);
        check(model.empty() || file->model().empty() || model == file->model(), "summary", flags.config_file,
              " describes model ", file->model(), " but --model is ", model);
        if (model.empty()) model = file->model();
        check(!model.empty(), "summary", "--model is required when ", flags.config_file, " names no \"model\"");
    }
    check(!model.empty(), "summary", "--model is required (", models::model_kind_names(), ")");
    models::ModelConfig config = models::summary_default_config(model);
    if (file) {
        file->apply_model_keys(config);
        const training::TrainingOptions defaults;
        (void)file->training(defaults);  // its "training" object is checked too, though unused here
    }
    for (const auto& [key, words] : flags.model_keys) config.set(key, words);
    config.validate();
    return config;
}

void run_summary(const SummaryFlags& flags) {
    const models::ModelConfig config = config_of(flags);
    Generator gen(1);
    const std::shared_ptr<models::Model> model = models::make_model(config, gen);
    const models::ModelSummary summary = models::summarize(*model, flags.shapes);
    std::fputs(models::format_summary(summary, flags.every_layer).c_str(), stdout);
}

}  // namespace

void add_summary_command(CLI::App& app) {
    auto flags = std::make_shared<SummaryFlags>();
    CLI::App* cmd =
        app.add_subcommand("summary", "Every layer's output shape and parameter count for one forward pass");
    cmd->footer(
        "Builds the model, runs one forward pass over a dummy batch in evaluation mode, and prints each layer's "
        "output shape under its module path (the names of its parameters), with attention's intermediate shapes "
        "(heads, scores, weights, merged), each module's own parameter count, and the parameters by group. Without "
        "--config the Transformer is paper-sized (d_model 512, 8 heads, 6 layers, d_ff 2048) and the LSTM models have "
        "hidden size 256 and 2 layers, all with vocabularies of 10000 (source) and 12000 (target).");
    std::vector<std::string> kinds;
    for (const models::ModelKind& kind : models::model_kinds()) kinds.push_back(kind.name);
    cmd->add_option("--model", flags->model, models::model_kind_names())->check(CLI::IsMember(kinds));
    cmd->add_option("--config", flags->config_file,
                    "A model config (JSON, as for train); its keys replace the defaults")
        ->check(CLI::ExistingFile);
    cmd->add_option("--batch", flags->shapes.batch, "Rows of the dummy batch")->capture_default_str();
    cmd->add_option("--src-len", flags->shapes.src_len, "Source length")->capture_default_str();
    cmd->add_option("--tgt-len", flags->shapes.tgt_len, "Target length")->capture_default_str();
    cmd->add_flag("--all", flags->every_layer, "Show every layer of a stack rather than folding the alike ones");
    add_option_flags(cmd, models::ModelConfig::options(), "Model keys (over the defaults and the config file)",
                     flags->model_keys, {"model"});
    cmd->callback([flags] { run_summary(*flags); });
}

}  // namespace seqgrad::cli
