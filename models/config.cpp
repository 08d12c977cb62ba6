// ModelConfig's one table: every key, its range and its meaning; each kind (registry.h) names the
// keys it reads.
#include <algorithm>

#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"

namespace seqgrad::models {
namespace {

using internal::OptionTable;
using C = ModelConfig;

const char* kOp = "model config";

// Keys every kind reads, beyond its vocabularies and its own.
const std::vector<std::string> kCommonKeys = {"model", "dropout"};

const OptionTable<C>& table() {
    static const OptionTable<C> table =
        OptionTable<C>(kOp)
            .add("model", "the kind of model", &C::model)
            .required()
            .add("src_vocab", "source vocabulary size, the four special tokens included", &C::src_vocab)
            .required()
            .at_least(4)
            .at_most(1 << 22)
            .add("tgt_vocab", "target vocabulary size, the four special tokens included", &C::tgt_vocab)
            .required()
            .at_least(4)
            .at_most(1 << 22)
            .add("vocab", "a language model's vocabulary size, the four special tokens included", &C::vocab)
            .required()
            .at_least(4)
            .at_most(1 << 22)
            .add("dropout", "dropout probability (the Transformer's; the LSTM models have none)", &C::dropout)
            .at_least(0)
            .below(1)
            .add("d_model", "the width of every layer", &C::d_model)
            .at_least(1)
            .at_most(1 << 16)
            .add("n_heads", "attention heads (d_model must be a multiple)", &C::n_heads)
            .at_least(1)
            .at_most(1 << 10)
            .add("n_layers", "layers of each stack", &C::n_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add("n_enc_layers", "encoder layers (default n_layers)", &C::n_enc_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add("n_dec_layers", "decoder layers (default n_layers)", &C::n_dec_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add("d_ff", "the feed-forward network's inner width", &C::d_ff)
            .at_least(1)
            .at_most(1 << 18)
            .add("max_seq_len", "the longest sequence, source or target", &C::max_seq_len)
            .at_least(1)
            .at_most(1 << 16)
            .add("norm", "post (the paper: after each residual sum) or pre (Pre-LN)", &C::norm)
            .one_of({"post", "pre"})
            .add("activation", "the feed-forward network's activation", &C::activation)
            .one_of({"relu", "gelu"})
            .add("positional",
                 "sinusoidal (a fixed table), learned (a trained table) or rope (rotary, in "
                 "self-attention)",
                 &C::positional)
            .one_of({"sinusoidal", "learned", "rope"})
            .add("share_embeddings", "one embedding for source and target (equal vocabularies)", &C::share_embeddings)
            .add("tie_output", "the output projection's weight is the target embedding", &C::tie_output)
            .add("context", "a language model's longest window, in tokens", &C::context)
            .at_least(1)
            .at_most(1 << 16)
            .add("bias", "a language model's linear layers and norms have biases", &C::bias)
            .add("hidden_size", "the LSTMs' hidden size", &C::hidden_size)
            .at_least(1)
            .at_most(1 << 16)
            .add("num_layers", "LSTM layers", &C::num_layers)
            .at_least(1)
            .at_most(1 << 10)
            .add("decoder",
                 "seq2seq: init_state (the encoder's final state starts the decoder) or context_input "
                 "(it joins every decoder input)",
                 &C::decoder)
            .one_of({"init_state", "context_input"})
            .add("attention", "attn_seq2seq: dot (scaled) or additive (Bahdanau)", &C::attention)
            .one_of({"dot", "additive"})
            .finish([](C& c, const std::set<std::string>& given) {
                // A file that gives only n_layers sets both stacks.
                if (!given.count("n_enc_layers")) c.n_enc_layers = c.n_layers;
                if (!given.count("n_dec_layers")) c.n_dec_layers = c.n_layers;
            });
    return table;
}

// The keys a config of this kind reads.
std::vector<std::string> keys_of(const ModelKind& kind) {
    std::vector<std::string> keys = kCommonKeys;
    keys.insert(keys.end(), kind.vocabularies.begin(), kind.vocabularies.end());
    keys.insert(keys.end(), kind.keys.begin(), kind.keys.end());
    return keys;
}

// Reads `json` over `c`: the kind first (the text's "model", else c's), then its keys.
void read_config(const internal::Json& json, C& c, const internal::ReadPolicy& policy) {
    check(json.is_object(), kOp, "expected a JSON object, got ", json.type_name());
    if (json.contains("model")) {
        check(json.at("model").is_string(), kOp, "\"model\" must be a string, got ", json.at("model").dump());
        c.model = json.at("model").get<std::string>();
    }
    check(!c.model.empty(), kOp, "missing \"model\" (", model_kind_names(), ")");
    const std::vector<std::string> keys = keys_of(model_kind(c.model));
    table().read(json, c, policy, &keys);
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text, bool strict, std::vector<std::string>* ignored_keys) {
    const internal::Json json = internal::parse_json(text, kOp);
    check(json.is_object() && json.contains("model"), kOp, "missing \"model\" (", model_kind_names(), ")");
    check(json.at("model").is_string(), kOp, "\"model\" must be a string, got ", json.at("model").dump());
    C c = model_kind(json.at("model").get<std::string>()).base;  // what the text leaves out
    read_config(json, c, {strict, ignored_keys});
    c.validate();
    return c;
}

void ModelConfig::update_from_json(const std::string& text) {
    C c = *this;
    read_config(internal::parse_json(text, kOp), c, {.strict = true, .ignored = nullptr, .complete = false});
    c.validate();
    *this = c;
}

std::string ModelConfig::to_json() const {
    const std::vector<std::string> keys = keys_of(model_kind(model));
    return table().write(*this, &keys).dump();
}

void ModelConfig::validate() const {
    const ModelKind& kind = model_kind(model);
    const std::vector<std::string> keys = keys_of(kind);
    table().validate(*this, &keys);
    if (kind.validate) kind.validate(*this);
    const int64_t parameters = kind.parameters(*this);
    check(parameters <= kMaxParameters, kOp, "the config asks for ", parameters, " parameters; the limit is ",
          kMaxParameters, " (2^31)");
}

std::string ModelConfig::describe() { return table().describe(); }

std::vector<OptionInfo> ModelConfig::options() { return table().options(); }

void ModelConfig::set(const std::string& key, const std::vector<std::string>& words) {
    const std::vector<std::string> keys = keys_of(model_kind(model));
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        std::string known;
        for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
        throw Error(detail::concat(kOp, ": model \"", model, "\" has no key \"", key, "\" (its keys: ", known, ")"));
    }
    table().set(*this, key, words);
}

}  // namespace seqgrad::models
