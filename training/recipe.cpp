// The model kinds' recipes (recipe.h). Each is the configs/ file the README trains that kind with;
// tests/test_recipe.cpp keeps the two the same.
#include "seqgrad/training/recipe.h"

#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/bert.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad::training {

namespace {

// A small Pre-LN Transformer that trains G2P in minutes on two cores: Adam at a constant rate,
// halved after each dev evaluation that does not improve, and a moving average of the weights
// evaluated and kept (configs/g2p-transformer.json).
Recipe transformer_recipe() {
    Recipe r;
    r.model = models::model_kind("transformer").defaults();
    models::TransformerKeys& m = r.model.keys<models::TransformerKeys>();
    m.d_model = 256;
    m.n_heads = 4;
    m.n_layers = m.n_enc_layers = m.n_dec_layers = 3;
    m.d_ff = 512;
    m.max_seq_len = 64;
    m.norm = "pre";
    r.model.dropout = 0.1f;
    r.training.schedule = "constant";
    r.training.lr = 1e-3;
    r.training.lr_decay = 0.5;
    r.training.average_decay = 0.999;
    return r;
}

// The LSTM encoder-decoders: 2 layers of 256, Adam at a constant rate
// (configs/g2p-attn_seq2seq.json, configs/g2p-seq2seq.json).
template <typename Keys>
Recipe lstm_recipe(const std::string& kind) {
    Recipe r;
    r.model = models::model_kind(kind).defaults();
    models::LstmShape& m = r.model.keys<Keys>();
    m.hidden_size = 256;
    m.num_layers = 2;
    r.training.schedule = "constant";
    r.training.lr = 1e-3;
    return r;
}

// nanoGPT's CPU recipe for Shakespeare's characters (configs/gpt-shakespeare-cpu.json): 4 layers
// of 128, windows of 64 characters, 12 of them a step; AdamW with nanoGPT's settings, a warm-up
// and a cosine down to a tenth (over max_steps, else over the run's time or epochs).
Recipe gpt_recipe() {
    Recipe r;
    r.model = models::model_kind("gpt").defaults();
    models::GptKeys& m = r.model.keys<models::GptKeys>();
    m.context = 64;
    m.d_model = 128;
    m.n_heads = 4;
    m.n_layers = 4;
    m.d_ff = 512;
    r.model.dropout = 0;
    m.bias = false;
    TrainingOptions& o = r.training;
    o.schedule = "cosine";
    o.lr = 1e-3;
    o.min_lr = 1e-4;
    o.warmup_steps = 100;
    o.beta2 = 0.99;
    o.eps = 1e-8;
    o.weight_decay = 0.1;
    o.decay = "matrices";
    o.clip_norm = 1.0f;
    o.label_smoothing = 0;
    o.batches.max_sentences = 12;
    o.eval_every_steps = 500;
    return r;
}

// A small BERT for two cores (configs/bert-langid.json): 2 Post-LN layers of 128 with GELU,
// rows of up to 64 SentencePiece pieces (a unigram model of 8000 trained on the training texts),
// 32 rows a step; AdamW with BERT's betas, epsilon and weight decay on the
// matrices, a warm-up and a cosine down to a tenth. Its task is classification unless the run
// gives a text (then a masked language model).
Recipe bert_recipe() {
    Recipe r;
    r.model = models::model_kind("bert").defaults();
    models::BertKeys& m = r.model.keys<models::BertKeys>();
    m.d_model = 128;
    m.n_heads = 4;
    m.n_layers = 2;
    m.d_ff = 512;
    m.max_seq_len = 64;
    r.model.dropout = 0.1f;
    TrainingOptions& o = r.training;
    o.task = "classify";
    o.tokens = "sentencepiece";
    o.schedule = "cosine";
    o.lr = 1e-3;
    o.min_lr = 1e-4;
    o.warmup_steps = 200;
    o.beta2 = 0.999;
    o.eps = 1e-6;
    o.weight_decay = 0.01;
    o.decay = "matrices";
    o.clip_norm = 1.0f;
    o.label_smoothing = 0;
    o.batches.max_sentences = 32;
    o.eval_every_steps = 1000;
    return r;
}

// One line a kind.
Recipe kind_recipe(const std::string& kind) {
    if (kind == "transformer") return transformer_recipe();
    if (kind == "attn_seq2seq") return lstm_recipe<models::AttnSeq2SeqKeys>(kind);
    if (kind == "seq2seq") return lstm_recipe<models::Seq2SeqKeys>(kind);
    if (kind == "gpt") return gpt_recipe();
    if (kind == "bert") return bert_recipe();
    throw Error("train: the model kind \"" + kind + "\" has no recipe: no task trains it yet");
}

}  // namespace

Recipe recipe(const std::string& model) {
    const models::ModelKind& kind = models::model_kind(model);  // an Error names the known kinds
    Recipe r = kind_recipe(kind.name);
    r.model.model = kind.name;
    // Filled in from the data; a size that validates until then.
    r.model.src_vocab = r.model.tgt_vocab = r.model.vocab = 4;
    return r;
}

}  // namespace seqgrad::training
