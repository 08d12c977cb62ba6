// What every model shares: the token-id conventions, the config of docs/parity.md, and the base
// class that training and every search are written against. The models themselves are registered
// in registry.h.
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "seqgrad/core/random.h"
#include "seqgrad/core/tensor.h"
#include "seqgrad/core/option_info.h"
#include "seqgrad/models/step_decoder.h"
#include "seqgrad/nn/module.h"

namespace seqgrad::models {

// Token ids (docs/parity.md). Batches are right-padded with kPad.
inline constexpr int64_t kPad = 0;
inline constexpr int64_t kSos = 1;
inline constexpr int64_t kEos = 2;
inline constexpr int64_t kUnk = 3;
// Tokens no text holds besides </s>: a language model's generation never writes them.
inline constexpr int64_t kNotInText[] = {kPad, kSos};
// An encoder's vocabulary (EncoderModel) has three more special tokens after those four: <cls>
// starts every row (the classifier reads its vector), <sep> ends each text of a row, and <mask>
// stands for a token the masked language model is to predict. Its data's symbols follow them.
inline constexpr int64_t kCls = 4;
inline constexpr int64_t kSep = 5;
inline constexpr int64_t kMask = 6;
inline constexpr int64_t kFirstEncoderSymbol = 7;

// A model's configuration: the JSON keys of docs/parity.md. The ones here every kind reads:
// "model" (the kind, registry.h), its vocabularies and dropout. The others are the kind's own: a
// struct declared beside its model (TransformerKeys in transformer.h, GptKeys in gpt.h, Seq2SeqKeys,
// AttnSeq2SeqKeys), whose option table gives each key's range, meaning and default; keys that several
// kinds read are a struct their keys derive from (TransformerShape, LstmShape). A config holds the
// keys of its kind only: model_kind(name).defaults() makes one, and keys<Keys>() reads them.
struct ModelConfig {
    std::string model;  // the kind: "transformer", "attn_seq2seq", "seq2seq" or "gpt"
    int64_t src_vocab = 0;
    int64_t tgt_vocab = 0;
    int64_t vocab = 0;  // a language model's one vocabulary
    float dropout = 0.1f;

    // The kind's own keys, as its struct: config.keys<TransformerKeys>().d_model. An Error for the
    // struct of another kind.
    template <typename Keys>
    const Keys& keys() const {
        if (const Keys* keys = std::any_cast<Keys>(&keys_)) return *keys;
        wrong_keys(typeid(Keys));
    }
    template <typename Keys>
    Keys& keys() {
        if (Keys* keys = std::any_cast<Keys>(&keys_)) return *keys;
        wrong_keys(typeid(Keys));
    }

    // Parses and validates a config: types, ranges, known values, and the checks of its kind.
    // Known keys that the kind does not read (another model's) are ignored. With `strict`, any
    // other key is an error (a typo in a user's config file); otherwise unknown keys are collected
    // in `ignored_keys`.
    static ModelConfig from_json(const std::string& text, bool strict = true,
                                 std::vector<std::string>* ignored_keys = nullptr);
    // The same keys read over this config: the ones the text leaves out keep their values here (the
    // kind's own start from its defaults if the text names another kind).
    void update_from_json(const std::string& text);
    std::string to_json() const;  // the keys that concern this model, as docs/parity.md names them
    // Throws an Error for a config the model cannot be built from.
    void validate() const;
    // Every key of every kind with its type, default, range and meaning, one a line.
    static std::string describe();
    // The keys a command line sets (`seqgrad train --d-model 128`), and setting one of this kind's
    // keys from the words given to its flag; Error for a key the kind does not read.
    static std::vector<OptionInfo> options();
    void set(const std::string& key, const std::vector<std::string>& words);

private:
    friend class KindKeys;  // a kind's keys, read, written and checked by its table (models/kind_keys.h)
    [[noreturn]] void wrong_keys(const std::type_info& asked) const;

    std::any keys_;  // the kind's struct of keys
};

// How a picture lays out the maps that last_attention() returns.
struct AttentionLayout {
    std::vector<std::string> titles;  // one per map; empty: "attention", or "map 1", "map 2", ...
    size_t maps_per_row = 1;
};

// The base every model kind shares (the registry, registry.h, builds one from a config): its
// config, its parameters (nn::Module), the loss of a batch, the generator behind its random
// choices, and the decoder interface (step_decoder.h) that every search is written against. Three
// families derive from it: sequence-to-sequence models (Seq2SeqModel, below), which read a source
// and write a target, language models, which continue a text, and encoders (EncoderModel), which
// read a text whole and label it or its masked tokens.
class Model : public nn::Module, public StepDecoder {
public:
    explicit Model(ModelConfig config) : config_(std::move(config)) {}
    const ModelConfig& config() const { return config_; }

    // Teacher-forced logits: inputs [B, T] -> [B, T, V], position t predicted from inputs up to t
    // (and, for a sequence-to-sequence model, from source [B, S]; a language model takes [B, 0]).
    virtual Tensor logits(const IntTensor& source, const IntTensor& inputs) = 0;
    // The loss of a batch (docs/parity.md): target [B, T + 1] is predicted position by position,
    // its first T columns the inputs and its last T the labels (<s> y1 .. yn </s> for a sequence
    // to sequence; a window of text for a language model). Cross-entropy over the labels that are
    // not kPad, with label smoothing.
    // An encoder (EncoderModel) predicts no next token and refuses it: its losses are its heads'.
    virtual Tensor loss(const IntTensor& source, const IntTensor& target, float label_smoothing);

    // The generator behind every random choice the model makes in training (dropout masks,
    // teacher forcing), shared by its layers; a checkpoint saves its state so that a resumed
    // run draws the same numbers.
    Generator& random() { return *random_; }
    const std::shared_ptr<Generator>& random_ptr() const { return random_; }

    // Step-by-step decoding (step_decoder.h); by default a model cannot decode.
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& source) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;

private:
    ModelConfig config_;
    std::shared_ptr<Generator> random_ = std::make_shared<Generator>(0x5eed);
};

// A language model: forward(tokens [B, T]) -> logits [B, T, vocab], position t predicted from the
// tokens up to t. It reads no source: decoding starts from nothing (start_decoding takes [N, 0]) and
// continues a prompt.
class LanguageModel : public Model {
public:
    using Model::Model;
    virtual Tensor forward(const IntTensor& tokens) = 0;
    Tensor logits(const IntTensor& source, const IntTensor& inputs) override;
};

// A sequence-to-sequence model: forward(src [B, S], tgt_in [B, T]) -> logits [B, T, tgt_vocab].
// Decoding starts from the source batch; searches feed <s> first.
class Seq2SeqModel : public Model {
public:
    using Model::Model;
    virtual Tensor forward(const IntTensor& src, const IntTensor& tgt_in) = 0;
    Tensor logits(const IntTensor& source, const IntTensor& inputs) override { return forward(source, inputs); }

    // The attention weights of the last step, for pictures: one [N, S] tensor per map (the
    // Transformer's: per layer and head), or none if the model does not keep them.
    virtual std::vector<Tensor> last_attention(const DecodingState& state) const;
    virtual AttentionLayout attention_layout() const { return {}; }

    // The teacher forcing ratio: in training, the probability that a step of a recurrent
    // decoder reads the true previous token rather than its own prediction (drawn once per step
    // for the whole batch). 1 (the default) always reads the truth; the Transformer decodes all
    // positions at once and always does.
    void set_teacher_forcing_ratio(float ratio);
    float teacher_forcing_ratio() const { return teacher_forcing_ratio_; }

private:
    float teacher_forcing_ratio_ = 1.0f;
};

// An encoder alone (BERT, bert.h): it reads a whole text at once, every position seeing every real
// token of its row, and neither continues a text nor translates one, so it cannot decode
// (start_decoding throws; its registry entry says `decodes = false`). forward gives each
// position's vector; two heads read them: the masked language model's (every position's logits
// over the vocabulary) and the classifier's (a row's class logits, from its first token's vector).
class EncoderModel : public Model {
public:
    using Model::Model;
    // tokens [B, T], right-padded with kPad (padding is masked as keys), and segments [B, T] (each
    // token's text, 0 or 1 for a pair) or an empty IntTensor for none -> hidden [B, T, d_model]
    virtual Tensor forward(const IntTensor& tokens, const IntTensor& segments = {}) = 0;
    // forward(tokens, segments)[:, :1]: the hidden vector of each row's first position (<cls>)
    // only, [B, 1, d_model], the one class_logits reads. The last layer runs for that position
    // alone (its keys and values still from every position), so classifying costs less.
    virtual Tensor forward_first(const IntTensor& tokens, const IntTensor& segments = {}) = 0;
    virtual Tensor mlm_logits(const Tensor& hidden) const = 0;    // -> [B, T, vocab]
    virtual Tensor class_logits(const Tensor& hidden) const = 0;  // -> [B, n_classes]
    virtual int64_t classes() const = 0;                          // the classifier's (0: none)
    bool classifies() const { return classes() > 0; }             // whether it has a classifier
    // Cross-entropy over the positions whose label [B, T] is not kPad (the masked ones); the head
    // runs at those positions only.
    Tensor mlm_loss(const Tensor& hidden, const IntTensor& labels) const;
    // Cross-entropy of each row's class, labels [B] in [0, n_classes).
    Tensor class_loss(const Tensor& hidden, const IntTensor& labels) const;
    // The masked language model's logits of every position, each read with the whole row
    // (source [B, 0], no segments): mlm_logits(forward(inputs)).
    Tensor logits(const IntTensor& source, const IntTensor& inputs) override;
    Tensor loss(const IntTensor& source, const IntTensor& target, float label_smoothing) override;
};

// The segments of rows laid out as an encoder reads texts, `<cls> a <sep>` or `<cls> a <sep> b
// <sep>` (then <pad>): each token's text, 0 up to and including a row's first <sep>, 1 after it.
IntTensor encoder_segments(const IntTensor& tokens);

// The loss of docs/parity.md: cross-entropy over logits [B, T, V] against tgt_out [B, T],
// ignoring kPad, with label smoothing.
Tensor sequence_loss(const Tensor& logits, const IntTensor& tgt_out, float label_smoothing);

}  // namespace seqgrad::models
