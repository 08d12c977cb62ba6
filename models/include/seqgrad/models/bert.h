// An encoder-only model, BERT (Devlin et al., 2019): the Transformer's encoder alone, reading a
// whole text in both directions, with a masked language model's head and a classifier's. The third
// family of model.h (EncoderModel): it neither continues a text nor translates one, so it does not
// decode. docs/parity.md names its keys and parameters.
#pragma once

#include <cstdint>
#include <memory>

#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/transformer.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/module.h"
#include "seqgrad/nn/positional.h"

namespace seqgrad::models {

// The BERT's config keys (docs/parity.md, "bert"): the Transformer's shape and its encoder stack's
// keys, with BERT-base's design (Post-LN, GELU, learned positions, the MLM output tied to the token
// embedding) and sizes as defaults, and its own.
struct BertKeys : TransformerShape, EncoderStack {
    BertKeys()
        : TransformerShape{.d_model = 768,
                           .n_heads = 12,
                           .n_layers = 12,
                           .d_ff = 3072,
                           .activation = "gelu",
                           .positional = "learned",
                           .tie_output = true},
          EncoderStack{.max_seq_len = 512, .norm = "post"} {}
    int64_t type_vocab = 2;  // segments (the texts of a pair); 0: no segment embedding
    int64_t n_classes = 2;   // the classifier's classes; 0: no classification head
};

// The masked language model's head: logits = output(norm(act(dense(h)))), the output's weight the
// token embedding's when tied, with a bias of its own.
class MlmHead : public nn::Module {
public:
    MlmHead(const BertKeys& keys, int64_t vocab, const Tensor& token_embedding, Generator& gen);
    Tensor forward(const Tensor& hidden) const;  // [B, T, d_model] -> [B, T, vocab]

    std::shared_ptr<nn::Linear> dense;
    std::shared_ptr<nn::LayerNorm> norm;
    std::shared_ptr<OutputProjection> output;
    bool gelu;
};

// The model (docs/parity.md, "bert"), over tokens [B, T] with T <= max_seq_len:
//   e = token_embedding(ids) + positions[:T] + segment_embedding(segments)
//   x = dropout(embedding_norm(e))           (Post-LN; Pre-LN: dropout(e), no embedding_norm)
//   hidden = layers(x, ids != <pad>)          (n_layers EncoderLayers; + final_norm in Pre-LN)
//   mlm_logits = mlm(hidden)                  (MlmHead)
//   class_logits = classifier(tanh(pooler(hidden[:, 0])))
// Positions (keys().positional): "learned", position_embedding.weight [max_seq_len, d_model]; the
// sinusoidal table (a buffer); or "rope", rotary positions in self-attention. Without segments
// (an empty IntTensor) every token is segment 0. Initialisation as BERT's: every matrix and
// embedding normal(0, 0.02), biases zero, norms 1 and 0.
class Bert : public EncoderModel {
public:
    Bert(const ModelConfig& config, Generator& gen);
    const BertKeys& keys() const { return config().keys<BertKeys>(); }

    Tensor forward(const IntTensor& tokens, const IntTensor& segments = {}) override;
    Tensor forward_first(const IntTensor& tokens, const IntTensor& segments = {}) override;
    Tensor mlm_logits(const Tensor& hidden) const override;
    Tensor class_logits(const Tensor& hidden) const override;
    int64_t classes() const override { return classifier ? keys().n_classes : 0; }

    std::shared_ptr<nn::Embedding> token_embedding;
    std::shared_ptr<nn::Embedding> position_embedding;   // "learned" only, else null
    std::shared_ptr<nn::PositionalEncoding> sinusoidal;  // "sinusoidal" only, else null
    std::shared_ptr<nn::Embedding> segment_embedding;    // type_vocab > 0 only, else null
    std::shared_ptr<nn::LayerNorm> embedding_norm;       // Post-LN only, else null
    std::shared_ptr<nn::Dropout> dropout;
    std::shared_ptr<nn::ModuleList<EncoderLayer>> layers;
    std::shared_ptr<nn::LayerNorm> final_norm;  // Pre-LN only, else null
    std::shared_ptr<MlmHead> mlm;
    std::shared_ptr<nn::Linear> pooler;      // n_classes > 0 only, else null
    std::shared_ptr<nn::Linear> classifier;  // n_classes > 0 only, else null

private:
    // forward(), or with `first_only` forward_first().
    Tensor encode(const IntTensor& tokens, const IntTensor& segments, bool first_only);
    // encode()'s work after its checks, on the tokens given: the batch, or one of split_batch's slices.
    Tensor encode_rows(const IntTensor& tokens, const IntTensor& segments, bool first_only) const;
    void check_hidden(const Tensor& hidden, const char* what) const;
};

// The checks across keys of a BERT config (d_model a multiple of n_heads, even widths where
// positions pair features). The registry's ModelKind::validate.
void check_bert_config(const ModelConfig& config);

// The registry's entry for "bert" (registry.h).
ModelKind bert_kind();

}  // namespace seqgrad::models
