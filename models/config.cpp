// ModelConfig: the keys every kind reads, in one table here, and each kind's own through its
// registry entry (kind_keys.h): the kind reads, writes and checks those with its table.
#include <algorithm>
#include <set>

#include "kind_keys.h"
#include "seqgrad/internal/option_table.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"

namespace seqgrad::models {
namespace {

using internal::OptionTable;
using C = ModelConfig;

const char* kOp = kModelConfig;

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
            .below(1);
    return table;
}

// The keys of this table that a config of this kind reads.
std::vector<std::string> common_keys_of(const ModelKind& kind) {
    std::vector<std::string> keys = kCommonKeys;
    keys.insert(keys.end(), kind.vocabularies.begin(), kind.vocabularies.end());
    return keys;
}

// Whether any kind reads the key: a config may hold keys of another kind, which are ignored.
bool known(const std::string& key) {
    if (table().has(key)) return true;
    const std::vector<ModelKind>& kinds = model_kinds();
    return std::any_of(kinds.begin(), kinds.end(), [&](const ModelKind& kind) { return kind.keys->has(key); });
}

// Reads `json` over `c`: the kind first (the text's "model", else c's), then its keys.
void read_config(const internal::Json& json, C& c, const internal::ReadPolicy& policy) {
    check(json.is_object(), kOp, "expected a JSON object, got ", json.type_name());
    std::string model = c.model;
    if (json.contains("model")) {
        check(json.at("model").is_string(), kOp, "\"model\" must be a string, got ", json.at("model").dump());
        model = json.at("model").get<std::string>();
    }
    check(!model.empty(), kOp, "missing \"model\" (", model_kind_names(), ")");
    const ModelKind& kind = model_kind(model);
    for (const auto& [key, value] : json.items()) {
        if (known(key)) continue;
        check(!policy.strict, kOp, "unknown key \"", key, "\"");
        if (policy.ignored) policy.ignored->push_back(key);
    }
    if (model != c.model) {  // another kind: its own keys start from its defaults
        c.model = model;
        kind.keys->reset(c);
    }
    const std::vector<std::string> keys = common_keys_of(kind);
    table().read(json, c, {.strict = false, .ignored = nullptr, .complete = policy.complete}, &keys);
    kind.keys->read(json, c, policy.complete);
}

// Each kind's keys once, after the common ones, for describe() and the command line: the kinds in
// the order docs/parity.md tables their keys (the registry lists them for help texts in another),
// then any it does not table. A key that several kinds read shows the first one's default.
template <typename Visit>
void for_each_kind_once(Visit&& visit) {
    static const std::vector<std::string> documented = {"transformer", "gpt", "bert", "seq2seq", "attn_seq2seq"};
    std::vector<const ModelKind*> kinds;
    for (const std::string& name : documented) kinds.push_back(&model_kind(name));
    for (const ModelKind& kind : model_kinds())
        if (std::find(documented.begin(), documented.end(), kind.name) == documented.end()) kinds.push_back(&kind);
    std::set<std::string> listed;
    for (const std::string& key : table().keys()) listed.insert(key);
    for (const ModelKind* kind : kinds) {
        std::vector<std::string> unlisted;
        for (const std::string& key : kind->keys->keys())
            if (listed.insert(key).second) unlisted.push_back(key);
        visit(*kind, unlisted);
    }
}

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text, bool strict, std::vector<std::string>* ignored_keys) {
    const internal::Json json = internal::parse_json(text, kOp);
    check(json.is_object() && json.contains("model"), kOp, "missing \"model\" (", model_kind_names(), ")");
    check(json.at("model").is_string(), kOp, "\"model\" must be a string, got ", json.at("model").dump());
    C c = model_kind(json.at("model").get<std::string>()).defaults();  // what the text leaves out
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
    const ModelKind& kind = model_kind(model);
    const std::vector<std::string> keys = common_keys_of(kind);
    internal::Json json = table().write(*this, &keys);
    json.update(kind.keys->write(*this));
    return json.dump();
}

void ModelConfig::validate() const {
    const ModelKind& kind = model_kind(model);
    const std::vector<std::string> keys = common_keys_of(kind);
    table().validate(*this, &keys);
    kind.keys->validate(*this);
    if (kind.validate) kind.validate(*this);
    const int64_t parameters = kind.parameters(*this);
    check(parameters <= kMaxParameters, kOp, "the config asks for ", parameters, " parameters; the limit is ",
          kMaxParameters, " (2^31)");
}

std::string ModelConfig::describe() {
    std::string text = table().describe();
    for_each_kind_once([&](const ModelKind& kind, const std::vector<std::string>& keys) {
        text += kind.keys->describe(keys);
    });
    return text;
}

std::vector<OptionInfo> ModelConfig::options() {
    std::vector<OptionInfo> options = table().options();
    for_each_kind_once([&](const ModelKind& kind, const std::vector<std::string>& keys) {
        for (const OptionInfo& option : kind.keys->options())
            if (std::find(keys.begin(), keys.end(), option.key) != keys.end()) options.push_back(option);
    });
    return options;
}

void ModelConfig::set(const std::string& key, const std::vector<std::string>& words) {
    const ModelKind& kind = model_kind(model);
    const std::vector<std::string> keys = kind.config_keys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        std::string known;
        for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
        throw Error(detail::concat(kOp, ": model \"", model, "\" has no key \"", key, "\" (its keys: ", known, ")"));
    }
    if (kind.keys->has(key)) {
        kind.keys->set(*this, key, words);
        return;
    }
    C c = *this;
    table().set(c, key, words);
    if (c.model != model) model_kind(c.model).keys->reset(c);  // another kind: its keys start from its defaults
    *this = c;
}

void ModelConfig::wrong_keys(const std::type_info& asked) const {
    auto whose = [](const std::type_info& type) {
        for (const ModelKind& kind : model_kinds())
            if (kind.keys->type() == type) return "a \"" + kind.name + "\" model's";
        return std::string("no kind's");
    };
    throw Error(detail::concat(kOp, ": the keys asked for are ", whose(asked), ", but the config (model \"", model,
                               "\") holds ", keys_.has_value() ? whose(keys_.type()) : std::string("none")));
}

ModelConfig ModelKind::defaults() const {
    ModelConfig config;
    config.model = name;
    keys->reset(config);
    return config;
}

std::vector<std::string> ModelKind::config_keys() const {
    std::vector<std::string> all = common_keys_of(*this);
    const std::vector<std::string> own = keys->keys();
    all.insert(all.end(), own.begin(), own.end());
    return all;
}

}  // namespace seqgrad::models
