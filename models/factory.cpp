// make_model: the model a config names.
#include "seqgrad/models/attn_seq2seq.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/seq2seq.h"
#include "seqgrad/models/transformer.h"

namespace seqgrad::models {

std::shared_ptr<Seq2SeqModel> make_model(const ModelConfig& config, Generator& gen) {
    if (config.model == "transformer") return std::make_shared<Transformer>(config, gen);
    if (config.model == "seq2seq") return std::make_shared<Seq2Seq>(config, gen);
    if (config.model == "attn_seq2seq") return std::make_shared<AttnSeq2Seq>(config, gen);
    throw Error("make_model: unknown model \"" + config.model + "\" (transformer, seq2seq or attn_seq2seq)");
}

}  // namespace seqgrad::models
