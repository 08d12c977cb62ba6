// ModelConfig from and to JSON, with every value checked.
#include <nlohmann/json.hpp>

#include <set>

#include "seqgrad/core/ops.h"
#include "seqgrad/models/model.h"

namespace seqgrad::models {
namespace {

using Json = nlohmann::json;

const char* kOp = "model config";

int64_t get_int(const Json& j, const char* key, int64_t fallback, int64_t minimum) {
    if (!j.contains(key)) return fallback;
    const Json& v = j.at(key);
    check(v.is_number_integer(), kOp, "\"", key, "\" must be an integer, got ", v.dump());
    const int64_t n = v.get<int64_t>();
    check(n >= minimum, kOp, "\"", key, "\" must be at least ", minimum, ", got ", n);
    return n;
}

std::string get_choice(const Json& j, const char* key, const std::string& fallback,
                       const std::set<std::string>& choices) {
    if (!j.contains(key)) return fallback;
    const Json& v = j.at(key);
    check(v.is_string(), kOp, "\"", key, "\" must be a string, got ", v.dump());
    const std::string s = v.get<std::string>();
    std::string allowed;
    for (const auto& c : choices) allowed += (allowed.empty() ? "" : ", ") + c;
    check(choices.count(s) != 0, kOp, "\"", key, "\" is \"", s, "\"; expected one of ", allowed);
    return s;
}

bool get_bool(const Json& j, const char* key, bool fallback) {
    if (!j.contains(key)) return fallback;
    check(j.at(key).is_boolean(), kOp, "\"", key, "\" must be true or false, got ", j.at(key).dump());
    return j.at(key).get<bool>();
}

const std::set<std::string> kKnownKeys = {
    "model",       "src_vocab", "tgt_vocab",  "d_model",        "n_heads",    "n_layers",
    "n_enc_layers", "n_dec_layers", "d_ff",   "max_seq_len",    "norm",       "activation",
    "dropout",     "share_embeddings", "tie_output", "hidden_size", "num_layers", "decoder",
    "attention"};

}  // namespace

ModelConfig ModelConfig::from_json(const std::string& text, bool strict, std::vector<std::string>* ignored_keys) {
    Json j;
    try {
        j = Json::parse(text);
    } catch (const Json::parse_error& e) {
        throw Error(std::string(kOp) + ": not valid JSON: " + e.what());
    }
    check(j.is_object(), kOp, "expected a JSON object, got ", j.type_name());
    for (const auto& [key, value] : j.items()) {
        if (kKnownKeys.count(key)) continue;
        check(!strict, kOp, "unknown key \"", key, "\"");
        if (ignored_keys) ignored_keys->push_back(key);
    }
    ModelConfig c;
    check(j.contains("model"), kOp, "missing \"model\" (transformer, seq2seq or attn_seq2seq)");
    c.model = get_choice(j, "model", "", {"transformer", "seq2seq", "attn_seq2seq"});
    check(j.contains("src_vocab") && j.contains("tgt_vocab"), kOp, "missing \"src_vocab\" or \"tgt_vocab\"");
    c.src_vocab = get_int(j, "src_vocab", 0, 4);  // room for the four special ids
    c.tgt_vocab = get_int(j, "tgt_vocab", 0, 4);
    c.dropout = 0.1f;
    if (j.contains("dropout")) {
        check(j.at("dropout").is_number(), kOp, "\"dropout\" must be a number, got ", j.at("dropout").dump());
        c.dropout = j.at("dropout").get<float>();
        check(c.dropout >= 0 && c.dropout < 1, kOp, "\"dropout\" must be in [0, 1), got ", c.dropout);
    }
    if (c.model == "transformer") {
        c.d_model = get_int(j, "d_model", c.d_model, 1);
        c.n_heads = get_int(j, "n_heads", c.n_heads, 1);
        c.n_layers = get_int(j, "n_layers", c.n_layers, 0);
        c.n_enc_layers = get_int(j, "n_enc_layers", c.n_layers, 0);
        c.n_dec_layers = get_int(j, "n_dec_layers", c.n_layers, 0);
        c.d_ff = get_int(j, "d_ff", c.d_ff, 1);
        c.max_seq_len = get_int(j, "max_seq_len", c.max_seq_len, 1);
        c.norm = get_choice(j, "norm", c.norm, {"post", "pre"});
        c.activation = get_choice(j, "activation", c.activation, {"relu", "gelu"});
        c.share_embeddings = get_bool(j, "share_embeddings", false);
        c.tie_output = get_bool(j, "tie_output", false);
        check(c.d_model % c.n_heads == 0, kOp, "d_model ", c.d_model, " is not divisible by n_heads ", c.n_heads);
        check(!c.share_embeddings || c.src_vocab == c.tgt_vocab, kOp,
              "share_embeddings needs equal vocabularies, got src_vocab ", c.src_vocab, " and tgt_vocab ", c.tgt_vocab);
    } else {
        c.hidden_size = get_int(j, "hidden_size", c.hidden_size, 1);
        c.num_layers = get_int(j, "num_layers", c.num_layers, 1);
        if (c.model == "seq2seq") c.decoder = get_choice(j, "decoder", c.decoder, {"init_state", "context_input"});
        else c.attention = get_choice(j, "attention", c.attention, {"dot", "additive"});
    }
    return c;
}

std::string ModelConfig::to_json() const {
    Json j;
    j["model"] = model;
    j["src_vocab"] = src_vocab;
    j["tgt_vocab"] = tgt_vocab;
    j["dropout"] = dropout;
    if (model == "transformer") {
        j["d_model"] = d_model;
        j["n_heads"] = n_heads;
        j["n_layers"] = n_layers;
        j["n_enc_layers"] = n_enc_layers;
        j["n_dec_layers"] = n_dec_layers;
        j["d_ff"] = d_ff;
        j["max_seq_len"] = max_seq_len;
        j["norm"] = norm;
        j["activation"] = activation;
        j["share_embeddings"] = share_embeddings;
        j["tie_output"] = tie_output;
    } else {
        j["hidden_size"] = hidden_size;
        j["num_layers"] = num_layers;
        if (model == "seq2seq") j["decoder"] = decoder;
        else j["attention"] = attention;
    }
    return j.dump();
}

Tensor sequence_loss(const Tensor& logits, const IntTensor& tgt_out, float label_smoothing) {
    return cross_entropy(logits, tgt_out, kPad, label_smoothing);
}

void Seq2SeqModel::set_teacher_forcing_ratio(float ratio) {
    check(ratio >= 0 && ratio <= 1, "teacher forcing", "the ratio must be in [0, 1], got ", ratio);
    teacher_forcing_ratio_ = ratio;
}

}  // namespace seqgrad::models
