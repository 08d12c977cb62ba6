// The model kinds, registered in one place (registry.cpp): each kind's name, the config keys it
// reads, its checks, its constructor, the recipe `seqgrad train` starts from, and what the
// schedule and the benchmarks need to know of it. Adding a model is a file of its own and one line
// in registry.cpp; the program, training, the summary and the benchmarks ask this registry.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {

class KindKeys;  // a kind's keys and their table (models/kind_keys.h)

struct ModelKind {
    std::string name;         // the config's "model"
    std::string description;  // one line, for help texts
    // The vocabularies the model reads, by their config keys: a sequence-to-sequence model's
    // source and target ("src_vocab", "tgt_vocab"), or a language model's one ("vocab"). Training
    // fills them in from the data; the first is the source's when there are two.
    std::vector<std::string> vocabularies = {"src_vocab", "tgt_vocab"};
    // Whether the model decodes step by step (step_decoder.h): a search, a translator or a text
    // generator can run on it. An encoder (EncoderModel) cannot.
    bool decodes = true;
    // Its own config keys, beyond "model", the vocabularies and "dropout": the struct of its keys
    // (TransformerKeys, ...) with their option table, which reads, writes and checks them, makes the
    // command line's flags, and gives their defaults (a default-constructed struct's: a GPT's
    // positions are learned and its output tied, for one). kind_keys<Keys>(table) makes it
    // (models/kind_keys.h).
    std::shared_ptr<const KindKeys> keys;
    // Adjusts keys that follow from the vocabulary sizes the data gives (set_vocabulary_sizes): a
    // Transformer shares its embeddings only between vocabularies of one size. None: nothing to do.
    std::function<void(ModelConfig&)> fit_vocabularies;
    // An encoder's: sets the classes of its classifier (0: none), which training takes from its
    // data. None for a kind without a classifier.
    std::function<void(ModelConfig&, int64_t)> set_classes;
    // Checks across keys that a key's own range cannot express (d_model divisible by n_heads).
    std::function<void(const ModelConfig&)> validate;
    std::function<std::shared_ptr<Model>(const ModelConfig&, Generator&)> make;
    // The width d of the Noam schedule: lr * d^-0.5 * min(t^-0.5, t * warmup^-1.5).
    std::function<int64_t(const ModelConfig&)> width;
    // The longest source, and target with its </s>, in tokens (0: no limit).
    std::function<int64_t(const ModelConfig&)> max_length = [](const ModelConfig&) { return int64_t{0}; };
    // The number of parameters a config asks for, counted from the config alone (equal to the
    // built model's num_parameters()), so that a config is judged before anything is allocated.
    std::function<int64_t(const ModelConfig&)> parameters;

    // A config of this kind, its keys at their defaults (its vocabularies' sizes are to be set).
    ModelConfig defaults() const;
    // The keys a config of this kind reads: "model", "dropout", its vocabularies, then its own.
    std::vector<std::string> config_keys() const;
};

// The largest model a config or a file may ask for: 2^31 parameters (8 GiB of float32 weights,
// and three times that to train). ModelConfig::validate refuses more.
inline constexpr int64_t kMaxParameters = int64_t{1} << 31;

// Every kind, in the order help texts list them.
const std::vector<ModelKind>& model_kinds();
// The kind of that name; an Error names the known ones.
const ModelKind& model_kind(const std::string& name);
// "transformer, attn_seq2seq, seq2seq or gpt"
std::string model_kind_names();

// Builds the model a config names, with weights initialised from `gen`.
std::shared_ptr<Model> make_model(const ModelConfig& config, Generator& gen);
// The three families of model.h, as a kind's config names them.
enum class Family { sequence_to_sequence, language_model, encoder };
Family family(const ModelConfig& config);
// "a sequence-to-sequence model", "a language model", "an encoder"
const char* family_name(Family family);
// Sets an encoder's classes (ModelKind::set_classes); an Error for a kind that does not classify.
void set_classes(ModelConfig& config, int64_t classes);

// Whether the kind reads a source (a sequence-to-sequence model) or only its own past (a language
// model): whether it has a source vocabulary.
bool reads_source(const ModelConfig& config);
// The sizes of the vocabularies a config names, (source, target): a language model's one
// vocabulary is its target, and its source's size is 0. set_vocabulary_sizes fills them in (a
// language model takes the target's) and lets the kind fit its keys to them (fit_vocabularies).
std::pair<int64_t, int64_t> vocabulary_sizes(const ModelConfig& config);
void set_vocabulary_sizes(ModelConfig& config, int64_t source, int64_t target);
// The kind's width of the config (ModelKind::width).
int64_t model_width(const ModelConfig& config);

}  // namespace seqgrad::models
