// The training loop (trainer.h): train() and resume() set up a Run; a Trainer carries it through
// one session, step by step, evaluating, keeping the best weights and writing checkpoints.
//
// Under MPI (nn/distributed.h) every rank runs this same loop on the same global batches: each
// takes its share of the rows, the gradients and the loss are summed over the ranks weighted by
// each share's target tokens, and every rank takes the same step. Rank 0 alone evaluates, reports
// and writes checkpoints; the decisions to stop are taken together.
#include "seqgrad/training/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/files.h"
#include "seqgrad/core/hash.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/nn/optim.h"
#include "seqgrad/text/model_file.h"
#include "seqgrad/training/data.h"
#include "seqgrad/training/task.h"

namespace seqgrad::training {

namespace fs = std::filesystem;

namespace {

// A run in memory: what train() and resume() set up, and a Trainer carries on.
struct Run {
    TrainingOptions options;
    CheckpointDir dir{""};
    std::unique_ptr<TaskData> data;  // as its task reads it, with the tokenizers and vocabularies
    std::shared_ptr<models::Model> model;
    std::unique_ptr<nn::Optimizer> optimizer;
    std::unique_ptr<nn::WeightAverage> average;  // with average_decay > 0
    std::unique_ptr<BatchSource> stream;
    Progress progress;

    int64_t longest() const { return models::model_kind(model->config().model).max_length(model->config()); }
};

// Gradients travel between ranks in buckets of at most this many floats (16 MiB): a handful of
// MPI_Allreduce calls per step for the models here, each large enough to run at the link's speed.
constexpr int64_t kBucketFloats = int64_t{1} << 22;

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainingOptions& o, models::Model& model) {
    if (o.optimizer == "sgd") {
        nn::SGDOptions s;
        s.lr = o.lr;
        s.weight_decay = o.weight_decay;
        return std::make_unique<nn::SGD>(model.named_parameters(), s);
    }
    nn::AdamOptions a;
    a.lr = o.lr;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.eps = o.eps;
    a.weight_decay = o.weight_decay;
    a.decay_matrices_only = o.decay == "matrices";
    if (o.weight_decay > 0) return std::make_unique<nn::AdamW>(model.named_parameters(), a);
    return std::make_unique<nn::Adam>(model.named_parameters(), a);
}

// A rank's own stream of random numbers for dropout (and teacher forcing), derived from the run's
// generator state and the rank: rank 0 keeps the state itself, so that a run of one process is
// unchanged; the others draw their own masks for their own rows.
void give_rank_its_randomness(models::Model& model, int rank) {
    if (rank == 0) return;
    uint64_t h = static_cast<uint64_t>(rank);
    for (const uint64_t word : model.random().state()) h = splitmix64_mix(h ^ word);
    model.random().seed(h);
}

// Every rank must have read the same data into the same vocabularies (the same files, the same
// tokenizers), or their gradients would be of different models.
void check_ranks_agree(const TaskData& data, const nn::Distributed& group) {
    if (group.size() == 1) return;
    Fnv1a64 h;
    for (const std::string& symbol : data.source_vocab.symbols()) h.add(symbol);
    for (const std::string& symbol : data.target_vocab.symbols()) h.add(symbol);
    h.add(data.training_size());
    check(group.all_equal(h.value()), "train",
          "the ranks read different training data or built different vocabularies (is every file the same on "
          "every machine? a SentencePiece model trained on each rank may differ: train it once and pass "
          "--src-spm-model/--tgt-spm-model)");
}

// One session of a run: the loop and its three parts (a step, an evaluation that may keep the
// best weights, a checkpoint), with the budget and the listener.
class Trainer {
public:
    Trainer(Run& run, const TrainingListener& listener, const std::atomic<bool>* stop_requested)
        : run_(run),
          listener_(listener),
          stop_requested_(stop_requested),
          seconds_before_(run.progress.seconds),
          start_step_(run.progress.step),
          start_position_(run.progress.schedule_position),
          evaluated_step_(run.progress.history.empty() ? -1 : run.progress.history.back().step),
          committed_step_(run.dir.has_training_state() ? run.progress.step : -1) {
        if (group_.size() > 1 && run.options.overlap_gradients)
            reducer_ = std::make_unique<nn::GradientReducer>(run.model->parameters(), group_, kBucketFloats);
    }

    TrainingResult run();

private:
    using Clock = std::chrono::steady_clock;

    bool step();
    double accumulate_gradients(const Batch& mine);
    void evaluate_and_keep_best(bool scheduled);  // collective: every rank calls it
    void evaluate_on_root(bool scheduled);
    void checkpoint(const std::string& why);
    void commit_checkpoint();
    void discard_checkpoint();

    double learning_rate(int64_t step) const;
    bool budget_reached() const;
    double budget_fraction() const;
    double epochs_done() const;  // whole epochs and the share of the current one
    // A cosine given neither decay_steps nor max_steps runs over the run's epochs or time.
    bool cosine_over_budget() const {
        const TrainingOptions& o = run_.options;
        return o.schedule == "cosine" && o.decay_steps == 0 && o.max_steps == 0;
    }
    double schedule_position() const;
    double session_seconds() const { return std::chrono::duration<double>(Clock::now() - session_start_).count(); }
    void emit(const TrainingEvent& e) const {
        if (listener_ && group_.is_root()) listener_(e);
    }
    void emit_message(const std::string& text, int64_t step) const {
        TrainingEvent e;
        e.kind = TrainingEvent::Kind::message;
        e.step = step;
        e.text = text;
        emit(e);
    }

    Run& run_;
    const TrainingListener& listener_;
    const std::atomic<bool>* stop_requested_;
    const nn::Distributed& group_ = nn::Distributed::current();
    const Clock::time_point session_start_ = Clock::now();
    const double seconds_before_;  // training time of the earlier sessions
    const int64_t start_step_;
    const double start_position_;  // the cosine's position when this session started
    int64_t saved_step_ = -1;      // the step of this session's last checkpoint
    int64_t evaluated_step_ = -1;  // the step of the last evaluation (known to every rank)
    bool pending_ = false;         // a checkpoint written but not yet committed
    int64_t committed_step_ = -1;  // the step of the checkpoint on disk, if any
    std::string pending_why_;
    std::unique_ptr<nn::GradientReducer> reducer_;   // with several ranks and overlap_gradients
    double recent_tokens_ = 0, recent_seconds_ = 0;  // decaying sums for tokens per second
};

TrainingResult Trainer::run() {
    const TrainingOptions& o = run_.options;
    for (const std::string& line : run_.data->report) {
        TrainingEvent e;
        e.kind = TrainingEvent::Kind::data;
        e.step = run_.progress.step;
        e.text = line;
        emit(e);
    }
    run_.model->train();
    if (auto* seq2seq = dynamic_cast<models::Seq2SeqModel*>(run_.model.get()))
        seq2seq->set_teacher_forcing_ratio(o.teacher_forcing);
    std::string stop_reason = "budget";
    for (;;) {
        // Together: the step and epoch budgets are the same on every rank, but the clock and a
        // stop request (Ctrl-C, SIGTERM) are each rank's own.
        constexpr uint64_t kBudget = 1, kStopRequested = 2;
        const uint64_t local = (budget_reached() ? kBudget : 0) |
                               (stop_requested_ && stop_requested_->load() ? kStopRequested : 0);
        const uint64_t decided = group_.any_bits(local);
        if (decided & kStopRequested) {
            stop_reason = "interrupted";
            break;
        }
        if (decided & kBudget) break;
        const int64_t epoch_before = run_.stream->state().epoch;
        if (!step()) {
            stop_reason = "diverged";
            break;
        }
        const bool epoch_ended = run_.stream->state().epoch > epoch_before;
        const bool eval_now = o.eval_every_steps > 0 ? run_.progress.step % o.eval_every_steps == 0 : epoch_ended;
        if (eval_now) {
            evaluate_and_keep_best(true);
            checkpoint(epoch_ended ? "end of epoch" : "evaluation");
        }
        if (o.save_every_steps > 0 && run_.progress.step % o.save_every_steps == 0) checkpoint("save_every_steps");
    }
    if (stop_reason != "diverged") {
        const bool just_evaluated = evaluated_step_ == run_.progress.step;
        if (run_.progress.step > start_step_ && !just_evaluated && stop_reason == "budget")
            evaluate_and_keep_best(false);
        checkpoint(stop_reason == "interrupted" ? "interrupted" : "end of run");
        commit_checkpoint();  // no next step will vouch for these weights: the run ends with them
    } else {
        discard_checkpoint();
    }
    TrainingResult result;
    result.stop_reason = stop_reason;
    result.steps = run_.progress.step;
    result.epochs = run_.stream->state().epoch;
    result.minutes = (seconds_before_ + session_seconds()) / 60.0;
    result.best_dev = run_.progress.best_dev;
    result.has_best = run_.progress.has_best;
    result.last_dev = run_.progress.last_dev;
    result.history = run_.progress.history;
    return result;
}

// One optimizer step on the next batch. False, with nothing updated, when the loss is not finite.
bool Trainer::step() {
    const TrainingOptions& o = run_.options;
    const auto t0 = Clock::now();
    const Batch batch = run_.stream->next();
    const MatmulPrecisionScope products(parse_precision(o.precision, "training options"));
    // This rank's rows (all of them in a run of one process). The loss is the mean over the
    // batch's target tokens: each rank's mean over its own tokens, weighted by its share of them.
    const Batch share = group_.size() == 1 ? Batch{} : share_of_batch(batch, group_.rank(), group_.size());
    const Batch& mine = group_.size() == 1 ? batch : share;
    const double weight = static_cast<double>(mine.target_tokens) / static_cast<double>(batch.target_tokens);
    run_.optimizer->zero_grad();
    Tensor loss;
    double loss_value = 0;
    const bool accumulating = o.accumulate > 1;
    if (accumulating) {
        loss_value = accumulate_gradients(mine);
    } else if (mine.src.size(0) > 0 || mine.tgt.size(0) > 0) {
        loss = run_.data->loss(*run_.model, mine, o.label_smoothing);
        loss_value = loss.item();
    }
    // The cosine's position over the budget, on rank 0's clock.
    double position = cosine_over_budget() ? schedule_position() : 0;
    if (group_.size() > 1) {
        // A non-finite loss on any rank makes the sum one.
        double sum[2] = {loss_value * weight, group_.is_root() ? position : 0};
        group_.all_reduce_sum(std::span<double>(sum));
        loss_value = sum[0];
        position = sum[1];
    }
    if (!std::isfinite(loss_value)) {
        const int64_t bad_step = run_.progress.step + 1;
        emit_message(detail::concat("the loss is ", loss_value, " at step ", bad_step, "; stopping. ",
                                    committed_step_ >= 0
                                        ? detail::concat("The last good checkpoint (step ", committed_step_,
                                                         ") is kept in ", run_.dir.path())
                                        : std::string("No checkpoint had been kept yet.")),
                     bad_step);
        return false;
    }
    commit_checkpoint();  // the weights it holds gave this finite loss
    // Under MPI the gradients are summed over the ranks bucket by bucket as the pass finishes them
    // (after the passes, when they accumulate over micro-batches).
    if (accumulating) {
        if (group_.size() > 1)
            nn::all_reduce_gradients(run_.model->parameters(), group_, static_cast<float>(weight), kBucketFloats);
    } else if (reducer_) {
        reducer_->backward(loss, static_cast<float>(weight));
    } else {
        if (loss.defined()) loss.backward();
        if (group_.size() > 1)
            nn::all_reduce_gradients(run_.model->parameters(), group_, static_cast<float>(weight), kBucketFloats);
    }
    if (o.clip_norm > 0) nn::clip_grad_norm(run_.model->parameters(), o.clip_norm);
    if (cosine_over_budget()) run_.progress.schedule_position = position;
    const double lr = learning_rate(run_.progress.step + 1);
    run_.optimizer->set_lr(lr);
    run_.optimizer->step();
    if (run_.average) run_.average->update();
    run_.progress.step++;
    run_.progress.loss_sum += loss_value;
    run_.progress.loss_steps++;

    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    // Tokens predicted; an encoder's, the tokens it read (its labels are a row's class, or masks).
    const int64_t tokens = batch.labels.dim() > 0 ? batch.source_tokens : batch.target_tokens;
    recent_tokens_ = 0.9 * recent_tokens_ + static_cast<double>(tokens);
    recent_seconds_ = 0.9 * recent_seconds_ + dt;
    TrainingEvent e;
    e.kind = TrainingEvent::Kind::step;
    e.step = run_.progress.step;
    e.epoch = run_.stream->state().epoch;
    e.batches_in_epoch = run_.stream->batches_in_epoch();
    e.batch_in_epoch = run_.stream->state().next_batch;
    e.loss = loss_value;
    e.learning_rate = lr;
    e.tokens_per_second = recent_seconds_ > 0 ? recent_tokens_ / recent_seconds_ : 0;
    e.elapsed_seconds = session_seconds();
    e.budget_fraction = budget_fraction();
    emit(e);
    return true;
}

// The forward and backward passes of `mine` in options.accumulate micro-batches of its rows (fewer
// when it has fewer rows), each micro-batch's loss weighted by its share of the tokens, so that the
// gradients and the returned loss are those of `mine` in one pass, to float32 summation order.
double Trainer::accumulate_gradients(const Batch& mine) {
    const int64_t rows = std::max(mine.src.size(0), mine.tgt.size(0));
    const auto parts = static_cast<int>(std::min<int64_t>(run_.options.accumulate, std::max<int64_t>(rows, 1)));
    double loss_value = 0;
    for (int part = 0; part < parts && rows > 0; ++part) {
        const Batch micro = share_of_batch(mine, part, parts);
        if (std::max(micro.src.size(0), micro.tgt.size(0)) == 0 || micro.target_tokens == 0) continue;
        const double share = static_cast<double>(micro.target_tokens) / static_cast<double>(mine.target_tokens);
        const Tensor loss = run_.data->loss(*run_.model, micro, run_.options.label_smoothing);
        loss_value += share * static_cast<double>(loss.item());
        mul(loss, static_cast<float>(share)).backward();  // the gradients add up over the micro-batches
    }
    return loss_value;
}

// Evaluates dev as the task does (the averaged weights, if kept), records the point of the curve,
// saves the weights if they are the best so far, and applies lr_decay after a scheduled evaluation
// (after an epoch or eval_every_steps, not at the end of a session) that does not improve.
void Trainer::evaluate_and_keep_best(bool scheduled) {
    evaluated_step_ = run_.progress.step;
    if (!group_.is_root()) {
        // Rank 0 evaluates; the others learn whether the rate decays.
        double lr_scale[1] = {run_.progress.lr_scale};
        group_.broadcast(std::span<double>(lr_scale));
        run_.progress.lr_scale = lr_scale[0];
        return;
    }
    evaluate_on_root(scheduled);
    double lr_scale[1] = {run_.progress.lr_scale};
    group_.broadcast(std::span<double>(lr_scale));
}

void Trainer::evaluate_on_root(bool scheduled) {
    Progress& p = run_.progress;
    // The raw weights come back even if the evaluation throws.
    struct SwapBack {
        nn::WeightAverage* average;
        ~SwapBack() {
            if (average) average->swap();
        }
    } swap_back{run_.average.get()};
    if (run_.average) run_.average->swap();

    models::DecodingOptions decoding;
    decoding.max_len = run_.options.eval_max_len;
    const Evaluator& evaluator = run_.data->evaluator();
    run_.model->eval();
    const EvalResult result =
        run_.data->evaluate(*run_.model, Split::dev, run_.options.dev_limit, run_.longest(), decoding);
    run_.model->train();

    p.last_dev = result;
    HistoryEntry entry;
    entry.step = p.step;
    entry.epoch = run_.stream->state().epoch;
    entry.minutes = (seconds_before_ + session_seconds()) / 60.0;
    entry.train_loss = p.loss_steps > 0 ? p.loss_sum / static_cast<double>(p.loss_steps) : 0;
    entry.dev = result;
    p.history.push_back(entry);
    p.loss_sum = 0;
    p.loss_steps = 0;
    TrainingEvent e;
    e.kind = TrainingEvent::Kind::evaluation;
    e.step = p.step;
    e.epoch = entry.epoch;
    e.eval = result;
    e.text = evaluator.describe(result);
    e.elapsed_seconds = session_seconds();
    emit(e);

    const double score = evaluator.value(result);
    if (!p.has_best || evaluator.better(score, evaluator.value(p.best_dev))) {
        p.has_best = true;
        p.best_dev = result;
        text::save_model(run_.dir.best_file(), *run_.model, *run_.data, run_.options.task, p.step);
    }
    if (run_.options.keep_checkpoints > 0) {  // the weights just evaluated (the average's, if kept)
        text::save_model(run_.dir.kept_file(p.step), *run_.model, *run_.data, run_.options.task, p.step);
        run_.dir.prune_kept(run_.options.keep_checkpoints);
    }
    if (!scheduled) return;
    if (p.scheduled_best < 0 || evaluator.better(score, p.scheduled_best)) {
        p.scheduled_best = score;
    } else if (run_.options.lr_decay < 1) {
        p.lr_scale *= run_.options.lr_decay;
        std::ostringstream text;
        text << std::fixed << std::setprecision(2) << "dev " << evaluator.metric() << " did not improve on "
             << p.scheduled_best << ": the learning rate is now " << std::defaultfloat << std::setprecision(3)
             << learning_rate(p.step + 1);
        emit_message(text.str(), p.step);
    }
}

// Writes training.safetensors, then model.safetensors, each atomically and stamped with the step
// (once per step: a second request at the same step writes nothing).
void Trainer::checkpoint(const std::string& why) {
    Progress& p = run_.progress;
    if (!group_.is_root() || saved_step_ == p.step) return;
    saved_step_ = p.step;
    p.seconds = seconds_before_ + session_seconds();
    p.random = run_.model->random().state();
    p.stream = run_.stream->state();
    // The training state holds the weights too, so that it alone resumes the run exactly.
    std::map<std::string, Tensor> state = run_.optimizer->state();
    if (run_.average) state.merge(run_.average->state());
    for (const auto& [name, tensor] : run_.model->state_dict()) state.emplace(kWeightsPrefix + name, tensor);
    try {
        save_training_state(CheckpointDir::pending(run_.dir.training_file()), run_.options, p, state);
        text::save_model(CheckpointDir::pending(run_.dir.model_file()), *run_.model, *run_.data, run_.options.task,
                         p.step);
    } catch (const Error& e) {
        discard_checkpoint();
        pending_ = false;
        throw Error(detail::concat("the checkpoint of step ", p.step, " was not written, and the last one in ",
                                   run_.dir.path(), " is intact: ", e.what()));
    }
    pending_ = true;
    pending_why_ = why;
}

void Trainer::commit_checkpoint() {
    if (!pending_) return;
    pending_ = false;
    run_.dir.commit_pending();
    committed_step_ = saved_step_;
    TrainingEvent e;
    e.kind = TrainingEvent::Kind::checkpoint;
    e.step = saved_step_;
    e.text = pending_why_;
    emit(e);
}

void Trainer::discard_checkpoint() {
    pending_ = false;
    if (group_.is_root()) run_.dir.discard_pending();
}

double Trainer::learning_rate(int64_t step) const {
    const TrainingOptions& o = run_.options;
    if (o.schedule == "constant") return o.lr * run_.progress.lr_scale;
    if (o.schedule == "cosine") {
        const nn::CosineSchedule cosine{o.lr, o.min_lr, o.warmup_steps,
                                        o.decay_steps > 0 ? o.decay_steps : o.max_steps};
        // Over the budget: the warm-up by steps, then the cosine by the position over the budget.
        return (cosine_over_budget() ? cosine.rate(step, run_.progress.schedule_position) : cosine.rate(step)) *
               run_.progress.lr_scale;
    }
    const int64_t width = models::model_width(run_.model->config());
    return nn::NoamSchedule{width, o.warmup_steps, o.lr}.rate(step) * run_.progress.lr_scale;
}

bool Trainer::budget_reached() const {
    const TrainingOptions& o = run_.options;
    return (o.max_steps > 0 && run_.progress.step >= o.max_steps) ||
           (o.epochs > 0 && run_.stream->state().epoch >= o.epochs) ||
           (o.minutes > 0 && session_seconds() >= 60.0 * o.minutes);
}

double Trainer::budget_fraction() const {
    const TrainingOptions& o = run_.options;
    double f = -1;
    if (o.max_steps > 0) f = std::max(f, static_cast<double>(run_.progress.step) / static_cast<double>(o.max_steps));
    if (o.minutes > 0) f = std::max(f, session_seconds() / (60.0 * o.minutes));
    if (o.epochs > 0) f = std::max(f, epochs_done() / static_cast<double>(o.epochs));
    return std::min(f, 1.0);
}

double Trainer::epochs_done() const {
    const BatchStreamState at = run_.stream->state();
    const double batches = static_cast<double>(std::max<int64_t>(run_.stream->batches_in_epoch(), 1));
    return static_cast<double>(at.epoch) + static_cast<double>(at.next_batch) / batches;
}

// The position (0 to 1) of a cosine over the budget: the run's share of its epochs, or, by the
// clock, from where the last session left it to 1 at the end of this session's minutes; the
// further of the two.
double Trainer::schedule_position() const {
    const TrainingOptions& o = run_.options;
    double position = 0;
    if (o.epochs > 0) position = epochs_done() / static_cast<double>(o.epochs);
    if (o.minutes > 0)
        position = std::max(position, start_position_ + (1 - start_position_) * session_seconds() / (60.0 * o.minutes));
    return std::min(position, 1.0);
}

// "precision": "bf16" on a CPU (or build) without bfloat16 products: refused before anything is
// read or written.
void check_precision_available(const TrainingOptions& options) {
    if (options.precision != "bf16") return;
    const std::string why = bf16_unavailable_reason();
    check(why.empty(), "training options", "\"precision\": \"bf16\": ", why, "; train in float32 instead");
}

// The kinds of a family, for messages: "transformer, attn_seq2seq or seq2seq".
std::string kinds_of(models::Family family) {
    std::vector<std::string> names;
    for (const models::ModelKind& kind : models::model_kinds()) {
        models::ModelConfig config;
        config.model = kind.name;
        if (models::family(config) == family) names.push_back(kind.name);
    }
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return text;
}

// The checkpoint `options.init_from` names, checked to be an encoder of the run's kind whose
// tokenizer reads texts as the options ask.
text::LoadedModel pretrained_encoder(const TrainingOptions& options, const models::ModelConfig& model_config) {
    const std::string& from = options.init_from;
    text::LoadedModel loaded = text::load_model(from);
    const std::string& kind = loaded.model->config().model;
    check(kind == model_config.model, "train", "--init-from ", from, " holds a \"", kind, "\" model, not a \"",
          model_config.model, "\" to start from");
    check(loaded.target_vocab.for_encoder(), "train", "--init-from ", from,
          ": its vocabulary is not an encoder's (<cls>, <sep>, <mask>)");
    const std::string& reads = loaded.target_tokenizer.kind();
    check(reads == options.tokens, "train", "--init-from ", from, " reads texts as \"", reads,
          "\" tokens, but this run asks for \"", options.tokens, "\" (--tokens ", reads,
          " reads them as the encoder learned them)");
    if (reads == "sentencepiece" && !options.spm_model.empty())
        check(text::Tokenizer::load_sentencepiece(options.spm_model).to_json() == loaded.target_tokenizer.to_json(),
              "train", "--init-from ", from, " reads texts with another SentencePiece model than ", options.spm_model,
              " (leave --spm-model out: the checkpoint's is used)");
    return loaded;
}

// Copies the pretrained encoder's weights into `model` (every tensor of the same name but the
// classifier's, which is new), and says what was taken.
std::string start_from(models::Model& model, const text::LoadedModel& pretrained, const std::string& from) {
    std::map<std::string, Tensor> state;
    for (const auto& [name, tensor] : model.state_dict()) state.emplace(name, tensor);
    const std::map<std::string, Tensor> before = state;
    int64_t taken = 0;
    for (const auto& [name, tensor] : pretrained.model->state_dict()) {
        if (name.starts_with("classifier.")) continue;
        const auto it = state.find(name);
        if (it == state.end()) continue;
        check(it->second.shape() == tensor.shape(), "train", "--init-from ", from, ": ", name, " is ", tensor.shape(),
              " there but ", it->second.shape(), " here");
        it->second = tensor;
        ++taken;
    }
    model.load_state_dict(state);
    std::string fresh;
    for (const auto& [name, tensor] : before)
        if (state.at(name).data() == tensor.data() && !name.ends_with(".bias"))
            fresh += (fresh.empty() ? "" : ", ") + name;
    return detail::concat("the encoder from ", pretrained.path, " (step ", pretrained.step, "): ", taken,
                          " tensors; new: ", fresh.empty() ? std::string("none") : fresh);
}

}  // namespace

TrainingResult train(const models::ModelConfig& model_config, const TrainingOptions& options,
                     const std::string& out_dir, const TrainingListener& listener,
                     const std::atomic<bool>* stop_requested) {
    options.validate();
    check_precision_available(options);
    const nn::Distributed& group = nn::Distributed::current();
    Run run;
    run.options = options;
    run.dir = CheckpointDir(out_dir);
    check(!run.dir.has_model() && !run.dir.has_training_state(), "train", out_dir,
          " already holds a checkpoint: resume it (--resume) or choose another directory");
    if (group.is_root() && run.dir.exists()) run.dir.remove_leftovers();
    const Task& task = training::task(options.task);
    check(task.family() == models::family(model_config), "train", "the task \"", options.task, "\" trains ",
          models::family_name(task.family()), " (", kinds_of(task.family()), "), not \"", model_config.model, "\"");
    // A classifier may start from a masked language model: its shape, tokenizer and vocabulary.
    std::optional<text::LoadedModel> start;
    models::ModelConfig config = model_config;
    DataRequest request = request_for(model_config);
    if (!options.init_from.empty()) {
        start = pretrained_encoder(options, model_config);
        config = start->model->config();
        config.dropout = model_config.dropout;
        request = request_for(config);
        request.read_as(*start);
    }
    run.data = task.prepare(options, request);
    check(run.data->has_train_and_dev(), "train", "the task \"", options.task, "\" has an empty train or dev split");
    check_ranks_agree(*run.data, group);
    models::set_vocabulary_sizes(config, run.data->source_vocab.size(), run.data->target_vocab.size());
    run.data->fit_config(config);
    Generator init(options.seed);
    run.model = models::make_model(models::ModelConfig::from_json(config.to_json()), init);  // validated like a file
    if (start) run.data->report.push_back(start_from(*run.model, *start, options.init_from));
    run.model->random().seed(options.seed ^ kSplitMixGamma);
    give_rank_its_randomness(*run.model, group.rank());
    nn::broadcast_parameters(run.model->parameters(), group);  // the same start on every rank, whatever
    run.optimizer = make_optimizer(options, *run.model);
    if (options.average_decay > 0)
        run.average = std::make_unique<nn::WeightAverage>(run.model->named_parameters(), options.average_decay);
    run.stream = run.data->batches(options, run.longest());
    // The directory comes last, so that a run refused above (bad data, a bad config, too little
    // memory) leaves nothing behind.
    // Rank 0 alone writes it.
    if (group.is_root()) {
        std::error_code ec;
        fs::create_directories(out_dir, ec);
        check(!ec && fs::is_directory(out_dir), "train", "cannot create the output directory ", out_dir,
              ec ? ": " + ec.message() : "");
    }
    return Trainer(run, listener, stop_requested).run();
}

TrainingResult resume(const std::string& dir, int64_t epochs, double minutes, int64_t max_steps,
                      const TrainingListener& listener, const std::atomic<bool>* stop_requested) {
    // Every rank reads the checkpoint (and the data): under MPI, put them where every machine sees
    // them. Rank 0 alone writes.
    const nn::Distributed& group = nn::Distributed::current();
    Run run;
    run.dir = CheckpointDir(dir);
    check(run.dir.exists(), "resume", "no checkpoint directory at ", dir);
    if (group.is_root()) run.dir.remove_leftovers();
    check(run.dir.has_training_state() && run.dir.has_model(), "resume", dir,
          " has no model.safetensors and training.safetensors to resume from");
    TrainingState saved = load_training_state(run.dir.training_file());
    run.options = saved.options;
    if (epochs > 0 || minutes > 0 || max_steps > 0) {
        run.options.epochs = epochs;
        run.options.minutes = minutes;
        run.options.max_steps = max_steps;
    }
    run.options.validate();
    check_precision_available(run.options);
    run.progress = saved.progress;
    text::LoadedModel loaded = text::load_model(run.dir.model_file());
    if (saved.weights.empty())  // a checkpoint from before the training state held the weights
        check(loaded.step == run.progress.step, "resume", dir, ": model.safetensors is from step ", loaded.step,
              " but training.safetensors from step ", run.progress.step,
              " (an interrupted save); cannot resume exactly");
    else loaded.model->load_state_dict(saved.weights);
    DataRequest request = request_for(loaded.model->config());
    request.read_as(loaded);
    try {
        run.data = training::task(run.options.task).prepare(run.options, request);
    } catch (const Error& e) {
        throw Error("resume: " + dir + ": " + e.what());
    }
    check(run.data->labels == loaded.labels, "resume", dir,
          ": the training file's labels are not those the checkpoint "
          "was trained with (was the file changed?)");
    check_ranks_agree(*run.data, group);
    run.model = loaded.model;
    run.model->random().set_state(run.progress.random);
    give_rank_its_randomness(*run.model, group.rank());
    nn::broadcast_parameters(run.model->parameters(), group);
    run.optimizer = make_optimizer(run.options, *run.model);
    run.optimizer->load_state(saved.optimizer);
    if (run.options.average_decay > 0) {
        run.average = std::make_unique<nn::WeightAverage>(run.model->named_parameters(), run.options.average_decay);
        run.average->load_state(saved.average);
    }
    run.stream = run.data->batches(run.options, run.longest());
    run.stream->restore(run.progress.stream);
    return Trainer(run, listener, stop_requested).run();
}

}  // namespace seqgrad::training
