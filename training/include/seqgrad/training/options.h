// The options of a training run: the task, batching, the optimizer and its schedule, the budgets,
// evaluation and the seed. Every key, its default and its range are listed once, in options.cpp;
// `seqgrad train --help` prints them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "seqgrad/core/option_info.h"
#include "seqgrad/training/batching.h"
#include "seqgrad/training/g2p.h"
#include "seqgrad/training/synthetic.h"

namespace seqgrad::training {

struct TrainingOptions {
    // The task (task.h): "g2p" (read from `dictionary`), "corpus" (your own pairs: `train`, `dev`,
    // `test`, pairs.h), "text" (a language model's: `text`, `val`), an encoder's "mlm" (a text
    // masked: `text`, `val`) or "classify" (labelled texts: `train`, `dev`, `test`), or a synthetic
    // one ("copy", "reverse", "sort").
    std::string task = "g2p";
    std::string dictionary = kCmudictPath;
    SyntheticOptions synthetic;

    // A corpus: each split one TSV file or two aligned files (source, target). Without dev files,
    // dev and test are carved from the training files by a hash of the source side.
    std::vector<std::string> train_files, dev_files, test_files;
    std::string src_tokens = "char";  // "char", "space" or "sentencepiece" (text/tokenizer.h)
    std::string tgt_tokens = "char";
    std::string src_spm_model, tgt_spm_model;  // a SentencePiece .model to load, or "" to train one
    std::string spm_type = "unigram";          // the kind of model trained: "unigram" or "bpe"
    int64_t spm_vocab_size = 8000;             // its pieces
    int64_t min_count = 1;                     // vocabularies keep the symbols seen at least this often in training
    int64_t max_vocab = 0;                     // and at most this many of the most frequent (0: no limit)
    bool skip_invalid = false;                 // train on the valid lines and count the others, instead of refusing

    // A text (text_data.h): the training text and the validation text (none: the training text's
    // last 10%), plain or gzip, read as `tokens`: "char" (code points), "byte" or "sentencepiece"
    // (spm_model, or a model trained on the training text).
    std::string text, val;
    std::string tokens = "char";
    std::string spm_model;

    // An encoder's tasks (encoder_data.h). mlm: the share of a text's positions masked (BERT's 15%).
    // classify: "none", or "sample" to draw each training row's class uniformly (then a text of it),
    // so that skewed labels are seen equally often; and a masked language model's checkpoint to
    // start the encoder from (its tokenizer, vocabulary and shape; the classifier new).
    double mask_rate = 0.15;
    std::string class_balance = "none";
    std::string init_from;

    BatchOptions batches;
    // "noam": lr * d^-0.5 * min(t^-0.5, t * warmup^-1.5); "constant"; or "cosine": linear warm-up to
    // lr, then a cosine down to min_lr at decay_steps (0: max_steps; without either, at the end of
    // the session's minutes or epochs, whichever comes first, on rank 0's clock).
    std::string schedule = "noam";
    double lr = 1.0;  // the constant rate, the cosine's peak, or Noam's factor
    double min_lr = 0.0;
    int64_t decay_steps = 0;
    // Each step's batch is cut into this many micro-batches, whose gradients add up to the whole
    // batch's (the loss weighted by each one's share of the tokens), to bound memory.
    int64_t accumulate = 1;
    // After a dev evaluation that does not improve on the best dev WER so far, the rate (either
    // schedule) is multiplied by this for the rest of the run; 1 never changes it.
    double lr_decay = 1.0;
    // Above 0: keep an exponential moving average of the weights with this decay (nn::WeightAverage),
    // and evaluate and keep as best the averaged weights instead of the raw ones.
    double average_decay = 0.0;
    int64_t warmup_steps = 1000;
    std::string optimizer = "adam";  // "adam" (AdamW with a weight_decay), or "sgd": plain w -= lr * g
    double beta1 = 0.9;
    double beta2 = 0.98;
    double eps = 1e-9;
    double weight_decay = 0.0;
    std::string decay = "all";  // what weight_decay applies to: "all", or "matrices" (rank >= 2)
    float clip_norm = 1.0f;     // 0 turns clipping off
    float label_smoothing = 0.1f;
    float teacher_forcing = 1.0f;
    // Under mpirun: start summing each bucket of gradients over the ranks as soon as the backward
    // pass has finished it (nn::GradientReducer), hiding the transfer behind the rest of the pass;
    // false sums them all after the pass (nn::all_reduce_gradients). The results are the same.
    bool overlap_gradients = true;

    // The matrix products of the forward and backward passes: "float32", or "bf16" (mixed
    // precision: each product's operands rounded to bfloat16 and summed in float32; the weights,
    // gradients, optimizer state, norms, softmax and loss stay float32; evaluation runs in float32).
    // bf16 needs a CPU with bfloat16 instructions (precision.h); elsewhere training refuses to start.
    std::string precision = "float32";

    // Budgets (0 = no limit; at least one must be set). minutes counts this session only.
    int64_t epochs = 0;
    double minutes = 0;
    int64_t max_steps = 0;

    int64_t eval_every_steps = 0;  // 0: after each epoch
    int64_t save_every_steps = 0;  // a checkpoint every N steps as well (0: with evaluations only)
    // Above 0: each dev evaluation also keeps the weights it evaluated (the average's, with
    // average_decay) as step-<step>.safetensors, the newest N of them (`seqgrad average` reads them).
    int64_t keep_checkpoints = 0;
    int64_t eval_max_len = 0;  // output tokens when decoding the dev split (0: the search's default)
    int64_t dev_limit = 0;     // evaluate on the first N dev words only (0: all)
    // The dev metric that picks the best weights and drives lr_decay: "auto" (the task's own: WER
    // for pairs, the loss for a text), or for pairs "wer", "bleu" or "chrf" (bleu_chrf.h).
    std::string dev_metric = "auto";
    int64_t log_every = 100;  // steps between plain log lines
    uint64_t seed = 1;

    std::string to_json() const;
    // Unknown keys are an error (a typo in a config file); keys left out keep their defaults.
    static TrainingOptions from_json(const std::string& text);
    // The same keys read over these options: the ones the text leaves out keep their values here.
    void update_from_json(const std::string& text);
    // Throws an Error naming the first option out of range (train() and resume() call it).
    void validate() const;
    // Every key with its type, default, range and meaning, one a line.
    static std::string describe();
    // The options a command line offers (`seqgrad train`'s flags), and setting one from the words
    // given to its flag, read and checked as the JSON key would be (validate() checks the ranges).
    static std::vector<OptionInfo> options();
    void set(const std::string& key, const std::vector<std::string>& words);
};

}  // namespace seqgrad::training
