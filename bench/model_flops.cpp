// The forward pass's FLOPs of each model kind (model_flops.h).
#include "model_flops.h"

#include <functional>
#include <map>
#include <string>

#include "seqgrad/core/error.h"
#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/bert.h"
#include "seqgrad/models/gpt.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad_bench {
namespace {

using seqgrad::models::ModelConfig;
using Count = std::function<double(const ModelConfig&, double batch, double src_len, double tgt_len)>;

// One LSTM layer, per token and direction: the four gates' input and recurrent products,
// 2 x 4h (input + h) multiply-adds.
double lstm_layer(int64_t input, int64_t hidden) {
    return 8.0 * static_cast<double>(hidden) * static_cast<double>(input + hidden);
}

double transformer(const ModelConfig& config, double b, double src, double tgt) {
    const seqgrad::models::TransformerKeys& c = config.keys<seqgrad::models::TransformerKeys>();
    const double ns = b * src, nt = b * tgt;  // source and target tokens
    const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
    // Encoder layer: Q, K, V, O projections; scores and weighted values; the two FFN products.
    const double encoder = 8 * ns * d * d + 4 * b * src * src * d + 4 * ns * d * f;
    // Decoder layer: self-attention as above over the target; cross-attention's Q and O on the
    // target and K and V on the source; its scores and values; the FFN.
    const double decoder = 8 * nt * d * d + 4 * b * tgt * tgt * d + 4 * nt * d * d + 4 * ns * d * d +
                           4 * b * tgt * src * d + 4 * nt * d * f;
    return static_cast<double>(c.n_enc_layers) * encoder + static_cast<double>(c.n_dec_layers) * decoder +
           2 * nt * d * static_cast<double>(config.tgt_vocab);
}

double attn_seq2seq(const ModelConfig& config, double b, double src, double tgt) {
    // A bidirectional encoder (layers above the first read 2h), fc from 2h to h, a decoder whose
    // first layer reads [embedding; context] (2h), and dot attention's scores and context (2 S h
    // multiply-adds each per target token).
    const seqgrad::models::AttnSeq2SeqKeys& c = config.keys<seqgrad::models::AttnSeq2SeqKeys>();
    const int64_t h = c.hidden_size;
    const double layers = static_cast<double>(c.num_layers), hh = static_cast<double>(h);
    const double source = b * src, target = b * tgt;
    const double encoder =
        2 * source * (lstm_layer(h, h) + (layers - 1) * lstm_layer(2 * h, h)) + 2 * source * 2 * hh * hh;
    const double decoder = target * (lstm_layer(2 * h, h) + (layers - 1) * lstm_layer(h, h)) + 4 * target * src * hh;
    return encoder + decoder + 2 * target * hh * static_cast<double>(config.tgt_vocab);
}

double seq2seq(const ModelConfig& config, double b, double src, double tgt) {
    const seqgrad::models::Seq2SeqKeys& c = config.keys<seqgrad::models::Seq2SeqKeys>();
    const double layers = static_cast<double>(c.num_layers), lstm = lstm_layer(c.hidden_size, c.hidden_size);
    const double source = b * src, target = b * tgt;
    const double output = 2 * target * static_cast<double>(c.hidden_size * config.tgt_vocab);
    return source * layers * lstm + target * layers * lstm + output;
}

double gpt(const ModelConfig& config, double b, double, double t) {
    const seqgrad::models::GptKeys& c = config.keys<seqgrad::models::GptKeys>();
    const double n = b * t;
    const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
    // A block: the Q, K, V, O projections, scores and weighted values (the masked half counted
    // too), the two feed-forward products; then the output projection.
    const double block = 8 * n * d * d + 4 * b * t * t * d + 4 * n * d * f;
    return static_cast<double>(c.n_layers) * block + 2 * n * d * static_cast<double>(config.vocab);
}

double bert(const ModelConfig& config, double b, double, double t) {
    return bert_flops(config, static_cast<int64_t>(b), static_cast<int64_t>(t), static_cast<int64_t>(b * t), true);
}

}  // namespace

double bert_flops(const ModelConfig& config, int64_t batch, int64_t length, int64_t mlm_positions, bool class_head) {
    const seqgrad::models::BertKeys& c = config.keys<seqgrad::models::BertKeys>();
    const double b = static_cast<double>(batch), t = static_cast<double>(length), n = b * t;
    const double d = static_cast<double>(c.d_model), f = static_cast<double>(c.d_ff);
    // A layer: the Q, K, V, O projections, scores and weighted values over the whole text, the two
    // feed-forward products. The MLM head at the positions it predicts (dense, then the
    // vocabulary), and the classifier on each row's first vector (pooler, classes).
    const double layer = 8 * n * d * d + 4 * b * t * t * d + 4 * n * d * f;
    // forward_first's last layer: keys and values of every position, the rest for the first.
    const double first_only = 4 * n * d * d + 4 * b * d * d + 4 * b * t * d + 4 * b * d * f;
    const double m = static_cast<double>(mlm_positions);
    const double mlm = 2 * m * d * d + 2 * m * d * static_cast<double>(config.vocab);
    const double classes = 2 * b * d * d + 2 * b * d * static_cast<double>(c.n_classes);
    const bool trimmed = class_head && mlm_positions == 0 && c.n_layers > 0;
    return static_cast<double>(c.n_layers) * layer - (trimmed ? layer - first_only : 0) + mlm +
           (class_head ? classes : 0);
}

double forward_flops(const ModelConfig& config, int64_t batch, int64_t src_len, int64_t tgt_len) {
    static const std::map<std::string, Count> counts = {
        {"transformer", transformer},
        {"attn_seq2seq", attn_seq2seq},
        {"seq2seq", seq2seq},
        {"gpt", gpt},
        {"bert", bert},
    };
    const auto found = counts.find(config.model);
    seqgrad::check(found != counts.end(), "forward_flops", "no FLOP count for the model kind \"", config.model,
                   "\" (bench/model_flops.cpp)");
    return found->second(config, static_cast<double>(batch), static_cast<double>(src_len),
                         static_cast<double>(tgt_len));
}

}  // namespace seqgrad_bench
