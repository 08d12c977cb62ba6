// A model's summary (`seqgrad summary`): one forward pass over a dummy batch with tracing on
// (nn/trace.h) gives every layer's output shape, and attention's intermediate shapes, under the
// layer's module path; the module tree gives each module's own parameter count and the totals.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "seqgrad/core/shape.h"
#include "seqgrad/models/model.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// One result a module computed during a traced pass.
struct TracedOutput {
    std::string path;  // the module's dotted path, as in state_dict names ("encoder_layers.0.attention");
                       // "" for the root
    std::string type;  // its class without namespaces ("MultiHeadAttention")
    std::string step;  // an intermediate result ("scores"), or "" for the module's output
    Shape shape;

    friend bool operator==(const TracedOutput&, const TracedOutput&) = default;
};

// Runs `run` with a recorder installed on this thread and returns what the modules reported, in
// order, each named by its path under `root` (Module::named_children). A module registered under
// several paths is named by the first, as named_parameters() would list it; one outside the tree
// is named "(outside the model)".
std::vector<TracedOutput> trace_outputs(const nn::Module& root, const std::function<void()>& run);

// A module's class without namespaces, e.g. "ModuleList<EncoderLayer>".
std::string module_type_name(const nn::Module& module);

// One module of the tree.
struct ModuleInfo {
    std::string path;            // "" for the root
    std::string type;            // its class; "6 x EncoderLayer" for a list of six EncoderLayers
    int64_t own_parameters = 0;  // registered on this module itself (not its submodules)
    int64_t parameters = 0;      // this module and everything below it
};

struct SummaryOptions {
    int64_t batch = 32;  // the shape walk-through of the paper-sized Transformer
    int64_t src_len = 10;
    int64_t tgt_len = 12;  // a language model's window
};

struct ModelSummary {
    std::string model_type;             // "Transformer"
    SummaryOptions options;             // the dummy batch's shape
    bool reads_source = true;           // false for a language model: no src
    std::vector<TracedOutput> outputs;  // the traced pass in order; last the model's logits (path "")
    std::vector<ModuleInfo> modules;    // the module tree, depth-first in registration order
    std::vector<ModuleInfo> groups;     // the root's own parameters (if any, path "") and its children
                                        // that hold parameters
    int64_t total_parameters = 0;       // model.num_parameters(); the groups add up to it
};

// Runs the model once in evaluation mode (its mode is restored afterwards) without recording
// gradients, over src [batch, src_len] and tgt_in [batch, tgt_len] (<s> first) of ordinary token
// ids (a language model: tokens [batch, tgt_len], no src), and gathers what it computed.
ModelSummary summarize(Model& model, const SummaryOptions& options = {});

// The summary as text: a table of module path, type, step (an intermediate result's name, or
// blank for the module's output), output shape and own parameter count (on the module's first
// row), then the parameters by group. Unless
// `every_layer`, the items of a module list whose outputs repeat item 0's (the Transformer's
// layers 1 to 5) are folded into one line each list; a run of rows that repeats (a recurrent
// decoder's steps) is always printed once with its count ("x12").
std::string format_summary(const ModelSummary& summary, bool every_layer = false);

// The configuration `seqgrad summary` builds without a config file: the paper-sized Transformer
// (d_model 512, 8 heads, 6 layers, d_ff 2048, post-LN) or the LSTM models with hidden size 256
// and 2 layers (ModelConfig's defaults), all with vocabularies of 10000 (source) and 12000
// (target). Error for a model kind the registry does not know.
ModelConfig summary_default_config(const std::string& model);

}  // namespace seqgrad::models
