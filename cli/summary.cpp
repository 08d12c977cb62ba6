// `seqgrad summary --model M [--config F.json]`: builds the model, runs one forward pass over a
// dummy batch with tracing on, and prints every layer's output shape and parameter count
// (models/summary.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "seqgrad/core/error.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/summary.h"

namespace seqgrad::cli {
namespace {

struct SummaryFlags {
    std::string model;
    std::string config_file;
    models::SummaryOptions shapes;
    bool every_layer = false;
};

std::string read_text_file(const std::string& path) {
    std::ifstream in(path);
    check(in.good(), "summary", "cannot read the config file ", path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The defaults for the model, with a config file's keys over them. The file may be one that
// `seqgrad train --config` reads: its "training" options are ignored here, and a model key it
// leaves out (the vocabulary sizes, which training takes from the data) keeps its default.
models::ModelConfig config_of(const SummaryFlags& flags) {
    if (flags.config_file.empty()) {
        check(!flags.model.empty(), "summary", "--model is required (", models::model_kind_names(), ")");
        return models::summary_default_config(flags.model);
    }
    nlohmann::json file = nlohmann::json::parse(read_text_file(flags.config_file), nullptr, false);
    check(!file.is_discarded() && file.is_object(), "summary", flags.config_file, " is not a JSON object");
    file.erase("training");
    std::string model = flags.model;
    if (file.contains("model")) {
        check(file.at("model").is_string(), "summary", flags.config_file, ": \"model\" must be a string");
        const std::string named = file.at("model").get<std::string>();
        check(model.empty() || model == named, "summary", flags.config_file, " describes model ", named,
              " but --model is ", model);
        model = named;
    }
    check(!model.empty(), "summary", "--model is required when ", flags.config_file, " names no \"model\"");

    models::ModelConfig config = models::summary_default_config(model);
    try {
        config.update_from_json(file.dump());  // the file's keys over the defaults
    } catch (const Error& e) {
        throw Error(flags.config_file + ": " + e.what());
    }
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
    cmd->callback([flags] { run_summary(*flags); });
}

}  // namespace seqgrad::cli
