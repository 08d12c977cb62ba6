// The BERT (bert.h): its heads, the model, and its registry entry. Its layers are the
// Transformer's EncoderLayers.
#include "seqgrad/models/bert.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "kind_keys.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/models/common.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/init.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::models {
namespace {

const char* kOp = "BERT";

}  // namespace

// ---- the masked language model's head ----

MlmHead::MlmHead(const BertKeys& keys, int64_t vocab, const Tensor& token_embedding, Generator& gen)
    : gelu(keys.activation == "gelu") {
    const int64_t d = keys.d_model;
    dense = register_module("dense", std::make_shared<nn::Linear>(d, d, gen));
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(d));
    output = register_module("output", keys.tie_output ? std::make_shared<OutputProjection>(token_embedding, gen)
                                                       : std::make_shared<OutputProjection>(d, vocab, gen));
}

Tensor MlmHead::forward(const Tensor& hidden) const {
    return output->forward(norm->forward(dense->forward(hidden, gelu ? nn::Activation::gelu : nn::Activation::relu)));
}

// ---- the model ----

Bert::Bert(const ModelConfig& config, Generator& gen) : EncoderModel(config) {
    check(config.model.empty() || config.model == "bert", kOp, "the config is for a \"", config.model, "\" model");
    ModelConfig named = config;  // a config built in code may leave the kind out
    named.model = "bert";
    named.validate();  // every key's range, then check_bert_config
    const BertKeys& k = keys();
    const int64_t d = k.d_model;
    const bool pre_norm = k.norm == "pre";
    // Every dropout mask comes from the model's one generator, which a checkpoint saves.
    const std::shared_ptr<Generator>& dropout_generator = random_ptr();

    token_embedding = register_module("token_embedding", std::make_shared<nn::Embedding>(config.vocab, d, gen));
    if (k.positional == "learned")
        position_embedding =
            register_module("position_embedding", std::make_shared<nn::Embedding>(k.max_seq_len, d, gen));
    else if (k.positional == "sinusoidal")
        sinusoidal = register_module("sinusoidal", std::make_shared<nn::PositionalEncoding>(d, k.max_seq_len));
    if (k.type_vocab > 0)
        segment_embedding = register_module("segment_embedding", std::make_shared<nn::Embedding>(k.type_vocab, d, gen));
    if (!pre_norm) embedding_norm = register_module("embedding_norm", std::make_shared<nn::LayerNorm>(d));
    dropout = register_module("dropout", std::make_shared<nn::Dropout>(config.dropout, dropout_generator));
    layers = register_module("layers", std::make_shared<nn::ModuleList<EncoderLayer>>());
    for (int64_t i = 0; i < k.n_layers; ++i)
        layers->push_back(std::make_shared<EncoderLayer>(k, pre_norm, config.dropout, gen, dropout_generator));
    if (pre_norm) final_norm = register_module("final_norm", std::make_shared<nn::LayerNorm>(d));
    mlm = register_module("mlm", std::make_shared<MlmHead>(k, config.vocab, token_embedding->weight, gen));
    if (k.n_classes > 0) {
        pooler = register_module("pooler", std::make_shared<nn::Linear>(d, d, gen));
        classifier = register_module("classifier", std::make_shared<nn::Linear>(d, k.n_classes, gen));
    }

    // BERT's initialisation: N(0, 0.02) for every matrix and embedding, biases zero (norms keep
    // gamma 1, beta 0).
    for (const auto& [name, param] : named_parameters()) {
        if (param.dim() >= 2) {
            nn::init_normal(param, gen, 0.02f);
        } else if (name.ends_with(".bias")) {
            Tensor bias = param;  // a handle to the same storage
            std::fill_n(bias.data(), bias.numel(), 0.0f);
        }
    }
}

Tensor Bert::forward(const IntTensor& tokens, const IntTensor& segments) { return encode(tokens, segments, false); }

Tensor Bert::forward_first(const IntTensor& tokens, const IntTensor& segments) {
    return encode(tokens, segments, true);
}

Tensor Bert::encode(const IntTensor& tokens, const IntTensor& segments, bool first_only) {
    check_token_ids(tokens, config().vocab, kOp, "tokens");
    const int64_t batch = tokens.size(0), length = tokens.size(1);
    check(length <= keys().max_seq_len, kOp, "tokens length ", length, " exceeds max_seq_len ", keys().max_seq_len);
    const bool given = segments.numel() > 0;
    check(!given || segment_embedding, kOp, "segments given to a model without segment embeddings (type_vocab 0)");
    if (given) {
        check(segments.shape() == tokens.shape(), kOp, "segments must be as the tokens, ", tokens.shape(), ", got ",
              segments.shape());
        check_token_ids(segments, keys().type_vocab, kOp, "segments");
    }
    // Texts are independent through the encoder: many of them run as a slice per thread, a piece
    // of the slice at a time.
    const auto texts = [&](int64_t begin, int64_t end) {
        std::vector<int64_t> rows(static_cast<size_t>(end - begin));
        std::iota(rows.begin(), rows.end(), begin);
        return encode_rows(select_rows(tokens, rows), given ? select_rows(segments, rows) : IntTensor(), first_only);
    };
    if (split_batch_pays(*this, batch, batch * length)) return split_batch(batch, texts, piece_sequences(length));
    return encode_rows(tokens, segments, first_only);
}

Tensor Bert::encode_rows(const IntTensor& tokens, const IntTensor& segments, bool first_only) const {
    const int64_t batch = tokens.size(0), length = tokens.size(1);
    const bool given = segments.numel() > 0;
    std::vector<int64_t> count(static_cast<size_t>(length));
    std::iota(count.begin(), count.end(), int64_t{0});
    const IntTensor positions = IntTensor::from_vector(count, {length});
    Tensor x;
    if (position_embedding && !nn::tracing()) {
        // The token's, the position's and the segment's rows summed in one pass, in the order of the
        // additions below.
        std::vector<Tensor> tables{token_embedding->weight, position_embedding->weight};
        std::vector<IntTensor> ids{tokens, positions};
        if (segment_embedding) {
            tables.push_back(segment_embedding->weight);
            ids.push_back(given ? segments : IntTensor::zeros({length}));
        }
        x = embeddings_sum(tables, ids);  // [B, T, d_model]
    } else {
        x = token_embedding->forward(tokens);  // [B, T, d_model]
        // A learned table is looked up as a module, so that the summary traces it.
        if (position_embedding) x = add(x, position_embedding->forward(positions));
        else if (sinusoidal) x = add(x, slice(sinusoidal->table, 0, 0, length));
        if (segment_embedding)
            x = add(x, segment_embedding->forward(given ? segments : IntTensor::zeros({batch, length})));
    }
    if (embedding_norm) x = embedding_norm->forward(x);
    x = dropout->forward(x);

    const IntTensor mask = nn::padding_mask(tokens, kPad);  // [B, 1, 1, T]: padding is never attended to
    for (size_t i = 0; i < layers->size(); ++i) {
        const EncoderLayer& layer = *(*layers)[i];
        x = first_only && i + 1 == layers->size() ? layer.forward_first(x, mask) : layer.forward(x, mask);
    }
    if (first_only && layers->size() == 0) x = slice(x, 1, 0, 1);
    if (final_norm) x = final_norm->forward(x);
    return x;
}

void Bert::check_hidden(const Tensor& hidden, const char* what) const {
    check(hidden.defined() && hidden.dim() == 3 && hidden.size(1) >= 1 && hidden.size(2) == keys().d_model, kOp, what,
          " takes hidden [B, T, ", keys().d_model, "], got ", hidden.defined() ? hidden.shape() : Shape{});
}

Tensor Bert::mlm_logits(const Tensor& hidden) const {
    check_hidden(hidden, "mlm_logits");
    return mlm->forward(hidden);
}

Tensor Bert::class_logits(const Tensor& hidden) const {
    check_hidden(hidden, "class_logits");
    check(classifier != nullptr, kOp, "the model has no classification head (n_classes 0)");
    const Tensor first = reshape(slice(hidden, 1, 0, 1), {hidden.size(0), keys().d_model});  // <cls>'s vector
    return classifier->forward(tanh(pooler->forward(first)));
}

// ---- the registry's entry ----

namespace {

// The BERT's keys, in docs/parity.md's order; those of its shape and stack are the Transformer's too.
const internal::OptionTable<BertKeys>& bert_keys_table() {
    using K = BertKeys;
    static const internal::OptionTable<K> table =
        internal::OptionTable<K>(kModelConfig)
            .add(transformer_shape_table<K>(), {"d_model", "n_heads", "n_layers", "d_ff"})
            .add(encoder_stack_table<K>(), {"max_seq_len", "norm"})
            .add(transformer_shape_table<K>(), {"activation", "positional", "tie_output"})
            .add("type_vocab", "an encoder's segment embeddings (2 for pairs of texts; 0: none)", &K::type_vocab)
            .at_least(0)
            .at_most(1 << 10)
            .add("n_classes", "an encoder's classes (0: no classification head)", &K::n_classes)
            .at_least(0)
            .at_most(1 << 20);
    return table;
}

}  // namespace

void check_bert_config(const ModelConfig& config) {
    const BertKeys& c = config.keys<BertKeys>();
    check_heads_and_positions(c, kOp);
}

ModelKind bert_kind() {
    ModelKind kind;
    kind.name = "bert";
    kind.description = "an encoder alone (BERT's design): bidirectional self-attention, MLM and classifier heads";
    kind.vocabularies = {"vocab"};
    kind.decodes = false;
    kind.keys = kind_keys(bert_keys_table());
    kind.set_classes = [](ModelConfig& c, int64_t classes) { c.keys<BertKeys>().n_classes = classes; };
    kind.validate = check_bert_config;
    kind.make = [](const ModelConfig& c, Generator& gen) { return std::make_shared<Bert>(c, gen); };
    kind.width = [](const ModelConfig& c) { return c.keys<BertKeys>().d_model; };
    kind.max_length = [](const ModelConfig& c) { return c.keys<BertKeys>().max_seq_len; };
    kind.parameters = [](const ModelConfig& config) {
        const BertKeys& c = config.keys<BertKeys>();
        const int64_t d = c.d_model, vocab = config.vocab, norm = 2 * d;
        const int64_t attention = 4 * (d * d + d), ffn = 2 * c.d_ff * d + c.d_ff + d;
        int64_t n = vocab * d + (c.positional == "learned" ? c.max_seq_len * d : 0) + c.type_vocab * d;
        n += norm;  // embedding_norm (Post-LN) or final_norm (Pre-LN)
        n += c.n_layers * (attention + ffn + 2 * norm);
        n += d * d + d + norm + (c.tie_output ? 0 : vocab * d) + vocab;  // the MLM head
        if (c.n_classes > 0) n += d * d + d + c.n_classes * (d + 1);     // pooler, classifier
        return n;
    };
    return kind;
}

}  // namespace seqgrad::models
