// The model kinds: one line each. A kind's definition (its keys, checks and constructor)
// sits in its model's file.
#include "seqgrad/models/registry.h"

#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/bert.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad::models {

const std::vector<ModelKind>& model_kinds() {
    static const std::vector<ModelKind> kinds = {
        transformer_kind(),   // sequence to sequence
        attn_seq2seq_kind(),  // sequence to sequence
        seq2seq_kind(),       // sequence to sequence
        gpt_kind(),           // a language model
        bert_kind(),          // an encoder alone: it does not decode
    };
    return kinds;
}

std::string model_kind_names() {
    const std::vector<ModelKind>& kinds = model_kinds();
    std::string names;
    for (size_t i = 0; i < kinds.size(); ++i)
        names += (i == 0 ? "" : i + 1 == kinds.size() ? " or " : ", ") + kinds[i].name;
    return names;
}

const ModelKind& model_kind(const std::string& name) {
    for (const ModelKind& kind : model_kinds())
        if (kind.name == name) return kind;
    throw Error("model config: unknown model \"" + name + "\" (" + model_kind_names() + ")");
}

std::shared_ptr<Model> make_model(const ModelConfig& config, Generator& gen) {
    return model_kind(config.model).make(config, gen);
}

Family family(const ModelConfig& config) {
    const ModelKind& kind = model_kind(config.model);
    if (kind.vocabularies.size() == 2) return Family::sequence_to_sequence;
    return kind.decodes ? Family::language_model : Family::encoder;
}

const char* family_name(Family family) {
    switch (family) {
        case Family::sequence_to_sequence: return "a sequence-to-sequence model";
        case Family::language_model: return "a language model";
        case Family::encoder: return "an encoder";
    }
    return "";
}

void set_classes(ModelConfig& config, int64_t classes) {
    const ModelKind& kind = model_kind(config.model);
    check(static_cast<bool>(kind.set_classes), "model config", "a \"", config.model, "\" model has no classifier");
    kind.set_classes(config, classes);
}

bool reads_source(const ModelConfig& config) { return model_kind(config.model).vocabularies.size() == 2; }

std::pair<int64_t, int64_t> vocabulary_sizes(const ModelConfig& config) {
    if (reads_source(config)) return {config.src_vocab, config.tgt_vocab};
    return {0, config.vocab};
}

void set_vocabulary_sizes(ModelConfig& config, int64_t source, int64_t target) {
    if (reads_source(config)) {
        config.src_vocab = source;
        config.tgt_vocab = target;
    } else {
        config.vocab = target;
    }
    const ModelKind& kind = model_kind(config.model);
    if (kind.fit_vocabularies) kind.fit_vocabularies(config);
}

int64_t model_width(const ModelConfig& config) { return model_kind(config.model).width(config); }

}  // namespace seqgrad::models
