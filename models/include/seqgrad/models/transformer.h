// The Transformer of "Attention Is All You Need" (Vaswani et al., 2017): EncoderLayer,
// DecoderLayer and the encoder-decoder model, in Post-LN (the paper) or Pre-LN, with the parameter
// names of docs/parity.md, optional weight tying, and incremental decoding with cached keys and values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/kv_cache.h"
#include "seqgrad/nn/layers.h"
#include "seqgrad/nn/module.h"
#include "seqgrad/nn/positional.h"

namespace seqgrad::models {

// The shape of a stack of Transformer blocks: the keys that the kinds built of them read (the
// Transformer's, the GPT's), with the base model's of the paper as defaults. Their table, which a
// kind's table takes them from, is transformer_shape_table (models/kind_keys.h).
struct TransformerShape {
    int64_t d_model = 512;
    int64_t n_heads = 8;
    int64_t n_layers = 6;
    int64_t d_ff = 2048;
    std::string activation = "relu";        // or "gelu"
    std::string positional = "sinusoidal";  // or "learned" (a trained table), "rope" (rotary, in attention)
    bool tie_output = false;                // output projection weight = target embedding
};

// The keys of a stack of EncoderLayers that the kinds built of them read beside their shape (the
// Transformer's, the BERT's): the longest sequence and where the norms sit. Their table is
// encoder_stack_table (models/kind_keys.h).
struct EncoderStack {
    int64_t max_seq_len = 5000;
    std::string norm = "post";  // "post" (the paper) or "pre" (Pre-LN)
};

// The Transformer's config keys (docs/parity.md, "transformer"): its shape and its own.
struct TransformerKeys : TransformerShape, EncoderStack {
    int64_t n_enc_layers = 6;       // default n_layers
    int64_t n_dec_layers = 6;       // default n_layers
    bool share_embeddings = false;  // one embedding for source and target (same vocabulary)
};

// One encoder layer: self-attention, then the position-wise feed-forward network, each wrapped
// in a residual connection with its LayerNorm (attention_norm, ffn_norm) and dropout.
//   Post-LN: x = norm(x + dropout(sublayer(x)))     Pre-LN: x = x + dropout(sublayer(norm(x)))
// Built from a Transformer's config, or from any kind's shape (the BERT's): with rotary positions
// (positional "rope") its self-attention rotates queries and keys.
class EncoderLayer : public nn::Module {
public:
    EncoderLayer(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator);
    EncoderLayer(const TransformerShape& shape, bool pre_norm, float dropout, Generator& gen,
                 std::shared_ptr<Generator> dropout_generator);
    // x [B, S, d_model], src_mask [B, 1, 1, S] -> [B, S, d_model]
    Tensor forward(const Tensor& x, const IntTensor& src_mask) const;
    // forward(x, src_mask)[:, :1]: the output at the first position only, [B, 1, d_model], its
    // query attending over every position's keys and values. The rest of the layer (queries, the
    // attention's output, the feed-forward network, the norms) runs for that one position: what a
    // classifier reading <cls> needs from the last layer, at about a sixth of the layer's products.
    Tensor forward_first(const Tensor& x, const IntTensor& src_mask) const;

    std::shared_ptr<nn::MultiHeadAttention> attention;
    std::shared_ptr<nn::LayerNorm> attention_norm;
    std::shared_ptr<nn::FeedForward> feed_forward;
    std::shared_ptr<nn::LayerNorm> ffn_norm;
    std::shared_ptr<nn::Dropout> dropout;
    bool pre_norm;
};

struct TransformerDecodingState;

// One decoder layer: masked self-attention, cross-attention (queries from the decoder, keys and
// values from the encoder's output) and the feed-forward network, each a residual sublayer as in
// EncoderLayer.
class DecoderLayer : public nn::Module {
public:
    DecoderLayer(const ModelConfig& config, Generator& gen, std::shared_ptr<Generator> dropout_generator);
    // x [B, T, d_model], memory [B, S, d_model], src_mask [B, 1, 1, S], tgt_mask [B, 1, T, T]
    // -> [B, T, d_model]
    Tensor forward(const Tensor& x, const Tensor& memory, const IntTensor& src_mask, const IntTensor& tgt_mask) const;
    // The same layer for one new position, x [N, 1, d_model] -> [N, 1, d_model], as layer `layer`
    // of the decoder: its self-attention steps through the state's cache (self_mask [N, 1, 1, t + 1]
    // masks the rows' padding), its cross-attention reads the state's keys and values of the
    // source (decoding only, no gradient).
    Tensor step(const Tensor& x, TransformerDecodingState& state, int64_t layer, const IntTensor& self_mask) const;

    std::shared_ptr<nn::MultiHeadAttention> self_attention;
    std::shared_ptr<nn::LayerNorm> self_attn_norm;
    std::shared_ptr<nn::MultiHeadAttention> cross_attention;
    std::shared_ptr<nn::LayerNorm> cross_attn_norm;
    std::shared_ptr<nn::FeedForward> feed_forward;
    std::shared_ptr<nn::LayerNorm> ffn_norm;
    std::shared_ptr<nn::Dropout> dropout;
    bool pre_norm;

private:
    // The three residual sublayers around the two attentions given, shared by forward and step.
    template <typename SelfAttend, typename CrossAttend>
    Tensor run(const Tensor& x, SelfAttend&& self_attend, CrossAttend&& cross_attend) const;
};

// The projection to the target vocabulary, logits = x W^T + b, named as nn.Linear ("output.weight",
// "output.bias"). With tie_output, W is the target embedding's table: it is registered there only,
// so named_parameters() and state_dict() list it once and an optimizer updates it once. Without
// `bias` (a GPT's), logits = x W^T.
class OutputProjection : public nn::Module {
public:
    OutputProjection(int64_t d_model, int64_t vocab, Generator& gen, bool bias = true);  // its own weight
    OutputProjection(const Tensor& tied_weight, Generator& gen, bool bias = true);       // W borrowed, [vocab, d]
    Tensor forward(const Tensor& x) const;  // [..., d_model] -> [..., vocab]

    Tensor weight;  // [vocab, d_model]
    Tensor bias;    // [vocab]

protected:
    void set_packed(std::optional<Precision> precision) override;

private:
    std::shared_ptr<const PackedMatrix> packed_weight_;  // pack_weights()'s snapshot of weight
};

// What the encoder hands to the decoder.
struct EncoderOutput {
    Tensor memory;       // [B, S, d_model]: the encoder stack's output (after encoder_norm in Pre-LN)
    IntTensor src_mask;  // [B, 1, 1, S]: src != <pad>, the key mask of cross-attention
};

// The Transformer's decoding state after t steps (model.h's DecodingState) for N rows
// (hypotheses): what the decoder would otherwise recompute at every step. Keys and values never
// move once written: a row finds them through tables of rows, so that beam search's reordering
// copies a few integers per row instead of every layer's keys, and a source's beams share its
// cross-attention keys and values.
//  - Self-attention: the decoder's nn::KeyValueCache (kv_cache.h says how).
//  - Cross-attention: projected once from the encoder's output, a cache row per source; row i
//    reads cache row cross_rows[i, 0] (the whole row of cross_rows holds that one value, as
//    gathered_attention reads it).
struct TransformerDecodingState : DecodingState {
    // Any rows, repeated or dropped (beam search drops the sources it has finished): only the
    // tables and the tokens change; the cache gains rows when there are more rows than it holds.
    void select_rows(const std::vector<int64_t>& rows) override;
    // Within groups (beam search): only the tables and the tokens change.
    void reorder_beams(const std::vector<int64_t>& rows, int64_t group) override;
    int64_t length() const { return tokens.size(1); }  // t
    int64_t rows() const { return tokens.size(0); }    // N

    IntTensor src_mask;                           // [N, 1, 1, S]
    IntTensor tokens;                             // [N, t]: the target tokens fed so far
    nn::KeyValueCache self_attention;             // every decoder layer's
    IntTensor cross_rows;                         // [N, S]
    std::vector<nn::KeysValues> cross_attention;  // per decoder layer, [M, S, d_model] each
    std::vector<Tensor> cross_attention_weights;  // per decoder layer, [N, H, 1, S]: the last step's
};

// The Transformer (docs/parity.md, "transformer"):
//   x = dropout(embedding(ids) * sqrt(d_model) + pe[:len])
//   memory = encoder_layers(x_src, src_mask)                  (+ encoder_norm in Pre-LN)
//   logits = output(decoder_layers(x_tgt, memory, src_mask, tgt_mask))  (+ decoder_norm in Pre-LN)
// src_mask = src != <pad> over keys; tgt_mask = (tgt_in != <pad> over keys) AND causal.
// Positions (keys().positional): "sinusoidal" pe, a buffer (the paper); "learned" pe, the parameter
// pos_encoder.weight [max_seq_len, d_model], which starts as the sinusoidal table; or "rope": no pe,
// and every self-attention rotates its queries and keys by their positions (nn::apply_rotary).
// Every other matrix is initialised Xavier-uniform.
//
// Weight tying (keys().share_embeddings, tie_output): a tied tensor is registered once,
// under the first name PyTorch's named_parameters() gives it ("src_embedding.weight", else
// "tgt_embedding.weight"); the other names are aliases (tied_aliases()) that state_dict() leaves
// out, as safetensors files (which cannot hold one tensor twice) do. Its gradient is the sum of
// its uses.
class Transformer : public Seq2SeqModel {
public:
    // Throws Error for a config the model cannot be built from (d_model not a multiple of n_heads
    // or odd, share_embeddings with different vocabularies, ...).
    Transformer(const ModelConfig& config, Generator& gen);
    const TransformerKeys& keys() const { return config().keys<TransformerKeys>(); }

    // src [B, S], tgt_in [B, T] -> logits [B, T, tgt_vocab]; forward = decode(encode(src)).
    Tensor forward(const IntTensor& src, const IntTensor& tgt_in) override;

    // The encoder half: src [B, S] -> memory [B, S, d_model] and its mask.
    EncoderOutput encode(const IntTensor& src) const;
    // The decoder half, teacher-forced over all of tgt_in [B, T]: -> logits [B, T, tgt_vocab].
    Tensor decode(const IntTensor& tgt_in, const Tensor& memory, const IntTensor& src_mask) const;

    // Incremental decoding (model.h): start_decoding(src) encodes; decode_step(state, tokens [B])
    // feeds each row's next input token and returns logits [B, tgt_vocab] for the following one,
    // those decode() gives at the same position. Keys and values are cached, so a step costs
    // O(t) instead of recomputing the whole prefix. last_attention(): the last step's
    // cross-attention weights, one [B, S] tensor per layer and head (layer-major).
    std::unique_ptr<DecodingState> start_decoding(const IntTensor& src) override;
    Tensor decode_step(DecodingState& state, const IntTensor& tokens) override;
    int64_t max_decode_length() const override { return keys().max_seq_len; }  // one position a step
    std::vector<Tensor> last_attention(const DecodingState& state) const override;
    AttentionLayout attention_layout() const override;  // "layer L head H", a row per layer

    // (alias, registered name) for each tied name that state_dict() leaves out, e.g.
    // ("output.weight", "tgt_embedding.weight"): what a loader renames in a checkpoint that lists
    // both (PyTorch's state_dict does). Empty without tying.
    std::vector<std::pair<std::string, std::string>> tied_aliases() const;

    std::shared_ptr<nn::Embedding> src_embedding;
    std::shared_ptr<nn::Embedding> tgt_embedding;         // the same module as src_embedding when shared
    std::shared_ptr<nn::PositionalEncoding> pos_encoder;  // null with rotary positions
    std::shared_ptr<nn::Dropout> dropout;
    std::shared_ptr<nn::ModuleList<EncoderLayer>> encoder_layers;
    std::shared_ptr<nn::ModuleList<DecoderLayer>> decoder_layers;
    std::shared_ptr<nn::LayerNorm> encoder_norm;  // Pre-LN only, else null
    std::shared_ptr<nn::LayerNorm> decoder_norm;  // Pre-LN only, else null
    std::shared_ptr<OutputProjection> output;

private:
    // ids [B, len] at positions position.. -> dropout(embedding(ids) * sqrt(d_model) + pe[position:
    // position + len]), [B, len, d_model]
    Tensor embed(const nn::Embedding& table, const IntTensor& ids, int64_t position = 0) const;
    // Throws Error unless ids is [B, len] with 1 <= len <= max_seq_len and ids in [0, vocab).
    void check_ids(const IntTensor& ids, int64_t vocab, const char* what) const;
    void check_length(const IntTensor& ids, const char* what) const;  // len <= max_seq_len
};

// The checks across keys of a Transformer config: d_model divisible by n_heads, an even width for
// the positional encoding, equal vocabularies when shared. The registry's ModelKind::validate.
void check_transformer_config(const ModelConfig& config);

// The registry's entry for "transformer" (registry.h).
ModelKind transformer_kind();

}  // namespace seqgrad::models
