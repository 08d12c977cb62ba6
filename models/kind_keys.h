// A model kind's own config keys as the config (model.h) and the registry (registry.h) use them:
// KindKeys, made by kind_keys<Keys>(table) from the struct the kind declares beside its model and
// that struct's option table; and the tables of the keys several kinds share, from which a kind's
// table takes them by name. Internal to the models layer: it speaks the option tables' JSON.
#pragma once

#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "seqgrad/core/error.h"
#include "seqgrad/core/option_info.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/lstm_encoder.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad::models {

// Every message about a config's keys starts so.
inline constexpr const char* kModelConfig = "model config";

// A kind's keys, whatever their struct: what ModelConfig asks of them.
class KindKeys {
public:
    virtual ~KindKeys() = default;
    virtual const std::type_info& type() const = 0;  // the struct's
    // Gives the config the kind's keys at their defaults.
    virtual void reset(ModelConfig& config) const = 0;
    virtual std::vector<std::string> keys() const = 0;  // in the table's order
    virtual bool has(const std::string& key) const = 0;
    // The kind's keys that `json` gives, each type-checked (every other key is left alone); with
    // `complete`, a required key missing is an Error.
    virtual void read(const internal::Json& json, ModelConfig& config, bool complete) const = 0;
    virtual internal::Json write(const ModelConfig& config) const = 0;
    virtual void validate(const ModelConfig& config) const = 0;  // each key's range and choices
    virtual void set(ModelConfig& config, const std::string& key, const std::vector<std::string>& words) const = 0;
    // The command line's options and describe()'s lines (of the keys in `only`), with the defaults.
    virtual std::vector<OptionInfo> options() const = 0;
    virtual std::string describe(const std::vector<std::string>& only) const = 0;

protected:
    template <typename Keys>
    static void give(ModelConfig& config, Keys keys) {
        config.keys_ = std::move(keys);
    }
};

template <typename Keys>
class KeysWithTable final : public KindKeys {
public:
    explicit KeysWithTable(const internal::OptionTable<Keys>& table) : table_(table) {}

    const std::type_info& type() const override { return typeid(Keys); }
    void reset(ModelConfig& config) const override { give(config, Keys{}); }
    std::vector<std::string> keys() const override { return table_.keys(); }
    bool has(const std::string& key) const override { return table_.has(key); }
    void read(const internal::Json& json, ModelConfig& config, bool complete) const override {
        // Unknown keys are the config's to judge: they may be the common keys or another kind's.
        table_.read(json, config.keys<Keys>(), {.strict = false, .ignored = nullptr, .complete = complete});
    }
    internal::Json write(const ModelConfig& config) const override { return table_.write(config.keys<Keys>()); }
    void validate(const ModelConfig& config) const override { table_.validate(config.keys<Keys>()); }
    void set(ModelConfig& config, const std::string& key, const std::vector<std::string>& words) const override {
        table_.set(config.keys<Keys>(), key, words);
    }
    std::vector<OptionInfo> options() const override { return table_.options(); }
    std::string describe(const std::vector<std::string>& only) const override { return table_.describe(&only); }

private:
    const internal::OptionTable<Keys>& table_;
};

// What a kind's registry entry holds of its keys: the struct Keys and its table.
template <typename Keys>
std::shared_ptr<const KindKeys> kind_keys(const internal::OptionTable<Keys>& table) {
    return std::make_shared<KeysWithTable<Keys>>(table);
}

// The checks across a Transformer shape's keys that the GPT and the BERT share (`op` names the
// kind in the message): heads divide d_model; rotary positions pair a head's features, sinusoidal
// ones the model's.
inline void check_heads_and_positions(const TransformerShape& c, const char* op) {
    check(c.d_model % c.n_heads == 0, op, "d_model ", c.d_model, " is not divisible by n_heads ", c.n_heads);
    if (c.positional == "rope")
        check((c.d_model / c.n_heads) % 2 == 0, op,
              "rotary positions pair a head's features, so d_model / n_heads must be even, got ",
              c.d_model / c.n_heads);
    if (c.positional == "sinusoidal")
        check(c.d_model % 2 == 0, op, "d_model must be even for the sinusoidal positions, got ", c.d_model);
}

// ---- keys several kinds share: a kind's table takes them by name ----

// The shape of a stack of Transformer blocks (TransformerShape, transformer.h), for the keys of a
// kind that derive from it.
template <typename K>
const internal::OptionTable<K>& transformer_shape_table() {
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add("d_model", "the width of every layer", &K::d_model)
            .at_least(1)
            .at_most(1 << 16)
            .add("n_heads", "attention heads (d_model must be a multiple)", &K::n_heads)
            .at_least(1)
            .at_most(1 << 10)
            .add("n_layers", "layers of each stack", &K::n_layers)
            .at_least(0)
            .at_most(1 << 10)
            .add("d_ff", "the feed-forward network's inner width", &K::d_ff)
            .at_least(1)
            .at_most(1 << 18)
            .add("activation", "the feed-forward network's activation", &K::activation)
            .one_of({"relu", "gelu"})
            .add("positional",
                 "sinusoidal (a fixed table), learned (a trained table) or rope (rotary, in "
                 "self-attention)",
                 &K::positional)
            .one_of({"sinusoidal", "learned", "rope"})
            .add("tie_output", "the output projection's weight is the target embedding", &K::tie_output);
    return table;
}

// The keys of a stack of encoder layers (EncoderStack, transformer.h), for the keys of a kind that
// derive from it.
template <typename K>
const internal::OptionTable<K>& encoder_stack_table() {
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add("max_seq_len", "the longest sequence, source or target", &K::max_seq_len)
            .at_least(1)
            .at_most(1 << 16)
            .add("norm", "post (the paper: after each residual sum) or pre (Pre-LN)", &K::norm)
            .one_of({"post", "pre"});
    return table;
}

// The LSTMs' size (LstmShape, lstm_encoder.h), for the keys of a kind that derive from it.
template <typename K>
const internal::OptionTable<K>& lstm_shape_table() {
    static const internal::OptionTable<K> table = internal::OptionTable<K>(kModelConfig)
                                                      .add("hidden_size", "the LSTMs' hidden size", &K::hidden_size)
                                                      .at_least(1)
                                                      .at_most(1 << 16)
                                                      .add("num_layers", "LSTM layers", &K::num_layers)
                                                      .at_least(1)
                                                      .at_most(1 << 10);
    return table;
}

}  // namespace seqgrad::models
