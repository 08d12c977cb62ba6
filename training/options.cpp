// The training options' one table: every key, its range and its meaning (options.h).
#include "seqgrad/training/options.h"

#include "seqgrad/internal/option_table.h"
#include "seqgrad/training/task.h"

namespace seqgrad::training {
namespace {

using internal::OptionTable;

const OptionTable<SyntheticOptions>& synthetic_table() {
    static const OptionTable<SyntheticOptions> table =
        OptionTable<SyntheticOptions>("synthetic task")
            .add("task", "which synthetic task (set from the run's task)", &SyntheticOptions::task)
            .add("vocab_size", "symbols a, b, ... (at most 26)", &SyntheticOptions::vocab_size)
            .add("min_length", "shortest sequence", &SyntheticOptions::min_length)
            .add("max_length", "longest sequence", &SyntheticOptions::max_length)
            .add("train_size", "training examples", &SyntheticOptions::train_size)
            .add("dev_size", "dev examples", &SyntheticOptions::dev_size)
            .add("test_size", "test examples", &SyntheticOptions::test_size);
    return table;
}

const OptionTable<TrainingOptions>& table() {
    using O = TrainingOptions;
    static const OptionTable<O> table =
        OptionTable<O>("training options")
            .add("task", "what the run trains on: " + task_names(), &O::task)
            .one_of(task_name_list())
            .add("dictionary", "the CMUdict file for g2p", &O::dictionary)
            .object("synthetic", "the synthetic task's sizes and lengths", synthetic_table(), &O::synthetic)
            .add("train",
                 "corpus: the training pairs, one TSV file or a source and a target file (classify: labelled texts)",
                 &O::train_files)
            .add("dev", "corpus, classify: the dev pairs or texts (none: carved from train by a hash of the source)",
                 &O::dev_files)
            .add("test", "corpus, classify: the test pairs or texts (none: carved from train)", &O::test_files)
            .add("src_tokens", "corpus: how the source is read: char, space or sentencepiece", &O::src_tokens)
            .one_of({"char", "space", "sentencepiece"})
            .add("tgt_tokens", "corpus: how the target is read: char, space or sentencepiece", &O::tgt_tokens)
            .one_of({"char", "space", "sentencepiece"})
            .add("src_spm_model", "a SentencePiece model for the source (none: train one)", &O::src_spm_model)
            .add("tgt_spm_model", "a SentencePiece model for the target (none: train one)", &O::tgt_spm_model)
            .add("spm_type", "the SentencePiece models trained: unigram or bpe", &O::spm_type)
            .one_of({"unigram", "bpe"})
            .add("spm_vocab_size", "pieces of each SentencePiece model trained", &O::spm_vocab_size)
            .at_least(8)
            .at_most(1 << 20)
            .add("min_count", "vocabularies keep symbols seen at least this often in training", &O::min_count)
            .at_least(1)
            .add("max_vocab", "and at most this many of the most frequent (0: no limit)", &O::max_vocab)
            .at_least(0)
            .add("skip_invalid", "train on the valid lines and count the others, instead of refusing", &O::skip_invalid)
            .add("text", "text, mlm: the training text (plain or gzip)", &O::text)
            .add("val", "text, mlm: the validation text (none: the training text's last 10%)", &O::val)
            .add("tokens", "text, mlm, classify: how texts are read: char, byte or sentencepiece", &O::tokens)
            .one_of({"char", "byte", "sentencepiece"})
            .add("spm_model", "text, mlm, classify: a SentencePiece model to read texts with (none: train one)",
                 &O::spm_model)
            .add("mask_rate", "mlm: the share of a text's positions masked", &O::mask_rate)
            .above(0)
            .below(1)
            .add("class_balance", "classify: none, or sample (each row's class drawn uniformly, then a text of it)",
                 &O::class_balance)
            .one_of({"none", "sample"})
            .add("init_from", "classify: start the encoder from this masked language model's checkpoint", &O::init_from)
            .add("batch_sentences", "sentences per batch (0: no limit)", &O::batches, &BatchOptions::max_sentences)
            .at_least(0)
            .flag("batch-size")
            .add("batch_tokens", "cells per batch, padding included (0: no limit)", &O::batches,
                 &BatchOptions::max_tokens)
            .at_least(0)
            .add("chunk_size", "examples shuffled together before sorting by length (0: all)", &O::batches,
                 &BatchOptions::chunk_size)
            .at_least(0)
            .add("schedule", "noam (warm-up, then 1/sqrt(step)), constant, or cosine (warm-up, then down to min_lr)",
                 &O::schedule)
            .one_of({"noam", "constant", "cosine"})
            .add("lr", "the constant rate, the cosine's peak, or the Noam schedule's factor", &O::lr)
            .above(0)
            .add("min_lr", "cosine: the rate it ends at", &O::min_lr)
            .at_least(0)
            .add("decay_steps",
                 "cosine: the step it reaches min_lr at (0: max_steps, else the end of the minutes or epochs)",
                 &O::decay_steps)
            .at_least(0)
            .add("accumulate", "micro-batches a step's batch is cut into, their gradients summed", &O::accumulate)
            .at_least(1)
            .add("lr_decay", "the rate's factor after a dev evaluation that does not improve", &O::lr_decay)
            .above(0)
            .at_most(1)
            .add("average_decay", "above 0: evaluate and keep a moving average of the weights", &O::average_decay)
            .at_least(0)
            .below(1)
            .add("warmup_steps", "the Noam and cosine schedules' warm-up", &O::warmup_steps)
            .above(0)
            .add("optimizer", "adam, or sgd: steps of the rate times the gradient, no momentum", &O::optimizer)
            .one_of({"adam", "sgd"})
            .add("beta1", "Adam's first-moment decay", &O::beta1)
            .at_least(0)
            .below(1)
            .add("beta2", "Adam's second-moment decay", &O::beta2)
            .at_least(0)
            .below(1)
            .add("eps", "Adam's epsilon", &O::eps)
            .above(0)
            .add("weight_decay", "above 0: AdamW with this decoupled decay (sgd: L2, added to the gradient)",
                 &O::weight_decay)
            .at_least(0)
            .add("decay",
                 "what weight_decay applies to: all, or matrices (weights and embeddings, not biases and norms)",
                 &O::decay)
            .one_of({"all", "matrices"})
            .add("clip_norm", "the gradients' largest global norm (0: no clipping)", &O::clip_norm)
            .at_least(0)
            .add("label_smoothing", "the loss's label smoothing", &O::label_smoothing)
            .at_least(0)
            .below(1)
            .add("teacher_forcing", "the recurrent decoders' chance of reading the true previous token",
                 &O::teacher_forcing)
            .at_least(0)
            .at_most(1)
            .add("overlap_gradients",
                 "under mpirun: sum each bucket of gradients over the ranks during the backward pass, not after it",
                 &O::overlap_gradients)
            .add("precision",
                 "the products of training: float32, or bf16 (bfloat16 operands, float32 sums; CPUs with "
                 "AVX512_BF16 or AMX)",
                 &O::precision)
            .one_of({"float32", "bf16"})
            .add("epochs", "budget: epochs in all (0: no limit)", &O::epochs)
            .at_least(0)
            .add("minutes", "budget: minutes in this session (0: no limit)", &O::minutes)
            .at_least(0)
            .add("max_steps", "budget: optimizer steps in all (0: no limit)", &O::max_steps)
            .at_least(0)
            .add("eval_every_steps", "evaluate every N steps (0: after each epoch)", &O::eval_every_steps)
            .at_least(0)
            .flag("eval-every")
            .add("save_every_steps", "a checkpoint every N steps as well (0: with evaluations and at the end)",
                 &O::save_every_steps)
            .at_least(0)
            .flag("save-every")
            .add("keep_checkpoints", "keep the weights of the last N dev evaluations, named by step (0: none)",
                 &O::keep_checkpoints)
            .at_least(0)
            .add("eval_max_len", "output tokens when decoding dev (0: twice the source's plus 10, at least 40)",
                 &O::eval_max_len)
            .at_least(0)
            .add("dev_limit", "evaluate on the first N dev examples only (0: all)", &O::dev_limit)
            .at_least(0)
            .add("dev_metric",
                 "what picks the best weights: auto (WER for pairs, the loss for a text, the masked loss for mlm, "
                 "accuracy for classify), or for pairs wer, bleu or chrf",
                 &O::dev_metric)
            .one_of({"auto", "wer", "bleu", "chrf"})
            .add("log_every", "steps between plain log lines", &O::log_every)
            .above(0)
            .add("seed", "the seed of the data order, the initial weights and dropout", &O::seed)
            .rule([](const O& o) {
                task(o.task).check(o);
                check(o.dev_files.size() <= 2 && o.test_files.size() <= 2, "training options",
                      "\"dev\" and \"test\" are one TSV file or a source and a target file");
                check(o.epochs > 0 || o.minutes > 0 || o.max_steps > 0, "training options",
                      "no budget: give epochs, minutes or max_steps (training would never stop)");
                check(o.batches.max_sentences > 0 || o.batches.max_tokens > 0, "training options",
                      "a batch needs a sentence or token limit");
                check(o.schedule != "cosine" || o.min_lr <= o.lr, "training options", "min_lr ", o.min_lr,
                      " is above lr ", o.lr);
            });
    return table;
}

}  // namespace

std::string TrainingOptions::to_json() const { return table().write(*this).dump(); }

TrainingOptions TrainingOptions::from_json(const std::string& text) { return table().read(text); }

void TrainingOptions::update_from_json(const std::string& text) {
    table().read(internal::parse_json(text, table().what()), *this,
                 {.strict = true, .ignored = nullptr, .complete = false});
}

void TrainingOptions::validate() const { table().validate(*this); }

std::string TrainingOptions::describe() { return table().describe(); }

std::vector<OptionInfo> TrainingOptions::options() { return table().options(); }

void TrainingOptions::set(const std::string& key, const std::vector<std::string>& words) {
    table().set(*this, key, words);
}

}  // namespace seqgrad::training
