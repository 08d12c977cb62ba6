// The training loop, dev evaluation, checkpoints and exact resume (training.h, checkpoint.h).
#include "seqgrad/models/training.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/checkpoint.h"
#include "seqgrad/models/metrics.h"
#include "seqgrad/nn/optim.h"

namespace seqgrad::models {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// ---- options ----

std::string TrainingOptions::to_json() const {
    Json j;
    j["task"] = task;
    j["dictionary"] = dictionary;
    j["synthetic"] = {{"task", synthetic.task},           {"vocab_size", synthetic.vocab_size},
                      {"min_length", synthetic.min_length}, {"max_length", synthetic.max_length},
                      {"train_size", synthetic.train_size}, {"dev_size", synthetic.dev_size},
                      {"test_size", synthetic.test_size}};
    j["batch_sentences"] = batches.max_sentences;
    j["batch_tokens"] = batches.max_tokens;
    j["schedule"] = schedule;
    j["lr"] = lr;
    j["lr_decay"] = lr_decay;
    j["average_decay"] = average_decay;
    j["warmup_steps"] = warmup_steps;
    j["beta1"] = beta1;
    j["beta2"] = beta2;
    j["eps"] = eps;
    j["weight_decay"] = weight_decay;
    j["clip_norm"] = clip_norm;
    j["label_smoothing"] = label_smoothing;
    j["teacher_forcing"] = teacher_forcing;
    j["epochs"] = epochs;
    j["minutes"] = minutes;
    j["max_steps"] = max_steps;
    j["eval_every_steps"] = eval_every_steps;
    j["eval_max_len"] = eval_max_len;
    j["dev_limit"] = dev_limit;
    j["log_every"] = log_every;
    j["seed"] = seed;
    return j.dump();
}

namespace {

const char* kOptionsOp = "training options";

template <typename T>
void read(const Json& j, const char* key, T& into) {
    if (!j.contains(key)) return;
    try {
        into = j.at(key).get<T>();
    } catch (const Json::exception&) {
        throw Error(std::string(kOptionsOp) + ": \"" + key + "\" has the wrong type: " + j.at(key).dump());
    }
}

}  // namespace

TrainingOptions TrainingOptions::from_json(const std::string& text) {
    Json j;
    try {
        j = Json::parse(text);
    } catch (const Json::parse_error& e) {
        throw Error(std::string(kOptionsOp) + ": not valid JSON: " + e.what());
    }
    check(j.is_object(), kOptionsOp, "expected a JSON object");
    static const std::vector<std::string> known = {
        "task", "dictionary", "synthetic", "batch_sentences", "batch_tokens", "schedule", "lr", "lr_decay",
        "average_decay", "warmup_steps", "beta1", "beta2", "eps", "weight_decay", "clip_norm", "label_smoothing", "teacher_forcing", "epochs",
        "minutes", "max_steps", "eval_every_steps", "eval_max_len", "dev_limit", "log_every", "seed"};
    for (const auto& [key, value] : j.items())
        check(std::find(known.begin(), known.end(), key) != known.end(), kOptionsOp, "unknown key \"", key, "\"");
    TrainingOptions o;
    read(j, "task", o.task);
    read(j, "dictionary", o.dictionary);
    if (j.contains("synthetic")) {
        const Json& s = j.at("synthetic");
        check(s.is_object(), kOptionsOp, "\"synthetic\" must be an object");
        read(s, "task", o.synthetic.task);
        read(s, "vocab_size", o.synthetic.vocab_size);
        read(s, "min_length", o.synthetic.min_length);
        read(s, "max_length", o.synthetic.max_length);
        read(s, "train_size", o.synthetic.train_size);
        read(s, "dev_size", o.synthetic.dev_size);
        read(s, "test_size", o.synthetic.test_size);
    }
    read(j, "batch_sentences", o.batches.max_sentences);
    read(j, "batch_tokens", o.batches.max_tokens);
    read(j, "schedule", o.schedule);
    read(j, "lr", o.lr);
    read(j, "lr_decay", o.lr_decay);
    read(j, "average_decay", o.average_decay);
    read(j, "warmup_steps", o.warmup_steps);
    read(j, "beta1", o.beta1);
    read(j, "beta2", o.beta2);
    read(j, "eps", o.eps);
    read(j, "weight_decay", o.weight_decay);
    read(j, "clip_norm", o.clip_norm);
    read(j, "label_smoothing", o.label_smoothing);
    read(j, "teacher_forcing", o.teacher_forcing);
    read(j, "epochs", o.epochs);
    read(j, "minutes", o.minutes);
    read(j, "max_steps", o.max_steps);
    read(j, "eval_every_steps", o.eval_every_steps);
    read(j, "eval_max_len", o.eval_max_len);
    read(j, "dev_limit", o.dev_limit);
    read(j, "log_every", o.log_every);
    read(j, "seed", o.seed);
    return o;
}

void TrainingOptions::validate() const {
    const TrainingOptions& o = *this;
    check(o.task == "g2p" || is_synthetic_task(o.task), kOptionsOp, "unknown task \"", o.task,
          "\" (g2p, copy, reverse or sort)");
    check(o.schedule == "noam" || o.schedule == "constant", kOptionsOp, "schedule must be noam or constant, got \"",
          o.schedule, "\"");
    check(o.lr > 0, kOptionsOp, "lr must be positive, got ", o.lr);
    check(o.lr_decay > 0 && o.lr_decay <= 1, kOptionsOp, "lr_decay must be in (0, 1], got ", o.lr_decay);
    check(o.average_decay >= 0 && o.average_decay < 1, kOptionsOp, "average_decay must be in [0, 1), got ",
          o.average_decay);
    check(o.warmup_steps > 0, kOptionsOp, "warmup_steps must be positive, got ", o.warmup_steps);
    check(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, kOptionsOp, "betas must be in [0, 1)");
    check(o.eps > 0 && o.weight_decay >= 0 && o.clip_norm >= 0, kOptionsOp, "eps must be positive, weight_decay and clip_norm non-negative");
    check(o.label_smoothing >= 0 && o.label_smoothing < 1, kOptionsOp, "label_smoothing must be in [0, 1), got ", o.label_smoothing);
    check(o.teacher_forcing >= 0 && o.teacher_forcing <= 1, kOptionsOp, "teacher_forcing must be in [0, 1], got ", o.teacher_forcing);
    check(o.epochs >= 0 && o.minutes >= 0 && o.max_steps >= 0, kOptionsOp, "budgets must be non-negative");
    check(o.epochs > 0 || o.minutes > 0 || o.max_steps > 0, kOptionsOp,
          "no budget: give epochs, minutes or max_steps (training would never stop)");
    check(o.batches.max_sentences >= 0 && o.batches.max_tokens >= 0 && (o.batches.max_sentences > 0 || o.batches.max_tokens > 0),
          kOptionsOp, "a batch needs a sentence or token limit");
    check(o.eval_every_steps >= 0 && o.eval_max_len > 0 && o.dev_limit >= 0 && o.log_every > 0, kOptionsOp,
          "eval_every_steps and dev_limit must be non-negative, eval_max_len and log_every positive");
}

namespace {

// ---- progress: what a checkpoint needs beyond the weights and the optimizer ----

struct Progress {
    int64_t step = 0;
    BatchStreamState stream;
    Generator::State random{};
    double seconds = 0;  // training time, all sessions
    bool has_best = false;
    EvalResult best_dev;
    EvalResult last_dev;
    std::vector<HistoryEntry> history;
    double loss_sum = 0;  // since the last history entry
    int64_t loss_steps = 0;
    // lr_decay's state: the product of the factors applied so far, and the best dev WER among the
    // scheduled evaluations (not those at the end of a session, so that a resumed run decays exactly
    // where an uninterrupted one would).
    double lr_scale = 1.0;
    double scheduled_best_wer = -1;  // none yet
};

Json eval_json(const EvalResult& e) { return {{"wer", e.wer}, {"per", e.per}, {"words", e.words}}; }
EvalResult eval_from(const Json& j) { return {j.at("wer").get<double>(), j.at("per").get<double>(), j.at("words").get<int64_t>()}; }

std::string progress_json(const Progress& p) {
    Json j;
    j["step"] = p.step;
    j["epoch"] = p.stream.epoch;
    j["next_batch"] = p.stream.next_batch;
    j["random"] = {p.random[0], p.random[1], p.random[2], p.random[3]};
    j["seconds"] = p.seconds;
    j["has_best"] = p.has_best;
    j["best_dev"] = eval_json(p.best_dev);
    j["last_dev"] = eval_json(p.last_dev);
    j["loss_sum"] = p.loss_sum;
    j["loss_steps"] = p.loss_steps;
    j["lr_scale"] = p.lr_scale;
    j["scheduled_best_wer"] = p.scheduled_best_wer;
    Json history = Json::array();
    for (const HistoryEntry& h : p.history)
        history.push_back({{"step", h.step}, {"epoch", h.epoch}, {"minutes", h.minutes}, {"train_loss", h.train_loss},
                           {"dev", eval_json(h.dev)}});
    j["history"] = history;
    return j.dump();
}

Progress progress_from(const std::string& text, const std::string& file) {
    try {
        const Json j = Json::parse(text);
        Progress p;
        p.step = j.at("step").get<int64_t>();
        p.stream.epoch = j.at("epoch").get<int64_t>();
        p.stream.next_batch = j.at("next_batch").get<int64_t>();
        for (size_t i = 0; i < 4; ++i) p.random[i] = j.at("random").at(i).get<uint64_t>();
        p.seconds = j.at("seconds").get<double>();
        p.has_best = j.at("has_best").get<bool>();
        p.best_dev = eval_from(j.at("best_dev"));
        p.last_dev = eval_from(j.at("last_dev"));
        p.loss_sum = j.at("loss_sum").get<double>();
        p.loss_steps = j.at("loss_steps").get<int64_t>();
        p.lr_scale = j.value("lr_scale", 1.0);  // these two are absent in checkpoints from before lr_decay
        p.scheduled_best_wer = j.value("scheduled_best_wer", -1.0);
        for (const Json& h : j.at("history"))
            p.history.push_back({h.at("step").get<int64_t>(), h.at("epoch").get<int64_t>(), h.at("minutes").get<double>(),
                                 h.at("train_loss").get<double>(), eval_from(h.at("dev"))});
        return p;
    } catch (const Json::exception& e) {
        throw Error(file + ": metadata \"progress\" is damaged: " + e.what());
    }
}

// ---- a run in memory ----

struct Run {
    TrainingOptions options;
    std::string dir;
    Dataset data;
    Vocabulary source_vocab, target_vocab;
    std::shared_ptr<Seq2SeqModel> model;
    std::unique_ptr<nn::Adam> optimizer;
    std::unique_ptr<nn::WeightAverage> average;  // with average_decay > 0
    std::unique_ptr<BatchStream> stream;
    Progress progress;

    std::string model_path() const { return (fs::path(dir) / "model.safetensors").string(); }
    std::string best_path() const { return (fs::path(dir) / "best.safetensors").string(); }
    std::string training_path() const { return (fs::path(dir) / "training.safetensors").string(); }
};

std::unique_ptr<nn::Adam> make_optimizer(const TrainingOptions& o, Seq2SeqModel& model) {
    nn::AdamOptions a;
    a.lr = o.lr;
    a.beta1 = o.beta1;
    a.beta2 = o.beta2;
    a.eps = o.eps;
    a.weight_decay = o.weight_decay;
    if (o.weight_decay > 0) return std::make_unique<nn::AdamW>(model.named_parameters(), a);
    return std::make_unique<nn::Adam>(model.named_parameters(), a);
}

double learning_rate(const Run& run, int64_t step) {
    if (run.options.schedule == "constant") return run.options.lr * run.progress.lr_scale;
    const ModelConfig& c = run.model->config();
    const int64_t width = c.model == "transformer" ? c.d_model : c.hidden_size;
    return nn::NoamSchedule{width, run.options.warmup_steps, run.options.lr}.rate(step) * run.progress.lr_scale;
}

// Writes training.safetensors, then model.safetensors: each atomically, both stamped with the step.
void save_checkpoint(Run& run) {
    run.progress.random = run.model->random().state();
    run.progress.stream = run.stream->state();
    SafetensorsFile training;
    training.set_metadata("format", "seqgrad-training-1");
    training.set_metadata("training", run.options.to_json());
    training.set_metadata("progress", progress_json(run.progress));
    training.set_metadata("step", std::to_string(run.progress.step));
    for (const auto& [name, tensor] : run.optimizer->state()) training.put(name, tensor);
    if (run.average)
        for (const auto& [name, tensor] : run.average->state()) training.put(name, tensor);
    training.save(run.training_path());
    save_model(run.model_path(), *run.model, run.source_vocab, run.target_vocab, run.options.task, run.progress.step);
}

std::vector<EncodedExample> training_examples(const Run& run) {
    return encode_for_training(run.data.train, run.source_vocab, run.target_vocab);
}

EvalResult evaluate_dev(Run& run) {
    std::vector<Example> dev = run.data.dev;
    if (run.options.dev_limit > 0 && static_cast<int64_t>(dev.size()) > run.options.dev_limit)
        dev.resize(static_cast<size_t>(run.options.dev_limit));
    DecodeOptions decode_options;
    decode_options.max_len = run.options.eval_max_len;
    run.model->eval();
    const EvalResult result = evaluate(*run.model, dev, run.source_vocab, run.target_vocab, decode_options);
    run.model->train();
    return result;
}

TrainingResult run_loop(Run& run, const TrainingListener& listener, const std::atomic<bool>* stop_requested) {
    using Clock = std::chrono::steady_clock;
    const TrainingOptions& o = run.options;
    auto emit = [&](TrainingEvent e) {
        if (listener) listener(e);
    };
    const auto session_start = Clock::now();
    const double seconds_before = run.progress.seconds;
    auto session_seconds = [&] { return std::chrono::duration<double>(Clock::now() - session_start).count(); };
    const int64_t start_step = run.progress.step;
    run.model->train();
    run.model->set_teacher_forcing_ratio(o.teacher_forcing);

    auto budget_fraction = [&]() -> double {
        double f = -1;
        if (o.max_steps > 0) f = std::max(f, static_cast<double>(run.progress.step) / static_cast<double>(o.max_steps));
        if (o.minutes > 0) f = std::max(f, session_seconds() / (60.0 * o.minutes));
        if (o.epochs > 0) {
            const double epochs_done = static_cast<double>(run.stream->state().epoch) +
                                       static_cast<double>(run.stream->state().next_batch) /
                                           static_cast<double>(std::max<int64_t>(run.stream->batches_in_epoch(), 1));
            f = std::max(f, epochs_done / static_cast<double>(o.epochs));
        }
        return std::min(f, 1.0);
    };
    auto budget_reached = [&] {
        return (o.max_steps > 0 && run.progress.step >= o.max_steps) ||
               (o.epochs > 0 && run.stream->state().epoch >= o.epochs) ||
               (o.minutes > 0 && session_seconds() >= 60.0 * o.minutes);
    };
    // scheduled: after an epoch or eval_every_steps, rather than at the end of a session.
    auto record_evaluation = [&](bool scheduled) {
        // Evaluate, and keep as best, the averaged weights; the raw ones come back even on an error.
        struct SwapBack {
            nn::WeightAverage* average;
            ~SwapBack() {
                if (average) average->swap();
            }
        } swap_back{run.average.get()};
        if (run.average) run.average->swap();
        const EvalResult dev = evaluate_dev(run);
        run.progress.last_dev = dev;
        HistoryEntry entry;
        entry.step = run.progress.step;
        entry.epoch = run.stream->state().epoch;
        entry.minutes = (seconds_before + session_seconds()) / 60.0;
        entry.train_loss = run.progress.loss_steps > 0 ? run.progress.loss_sum / static_cast<double>(run.progress.loss_steps) : 0;
        entry.dev = dev;
        run.progress.history.push_back(entry);
        run.progress.loss_sum = 0;
        run.progress.loss_steps = 0;
        TrainingEvent e;
        e.kind = TrainingEvent::Kind::evaluation;
        e.step = run.progress.step;
        e.epoch = entry.epoch;
        e.eval = dev;
        e.elapsed_seconds = session_seconds();
        emit(e);
        if (!run.progress.has_best || dev.wer < run.progress.best_dev.wer) {
            run.progress.has_best = true;
            run.progress.best_dev = dev;
            save_model(run.best_path(), *run.model, run.source_vocab, run.target_vocab, o.task, run.progress.step);
        }
        if (!scheduled) return;
        if (run.progress.scheduled_best_wer < 0 || dev.wer < run.progress.scheduled_best_wer) {
            run.progress.scheduled_best_wer = dev.wer;
        } else if (o.lr_decay < 1) {
            run.progress.lr_scale *= o.lr_decay;
            TrainingEvent m;
            m.kind = TrainingEvent::Kind::message;
            m.step = run.progress.step;
            std::ostringstream text;
            text << std::fixed << std::setprecision(2) << "dev WER did not improve on " << run.progress.scheduled_best_wer
                 << "%: the learning rate is now " << std::defaultfloat << std::setprecision(3)
                 << learning_rate(run, run.progress.step + 1);
            m.text = text.str();
            emit(m);
        }
    };
    int64_t saved_step = -1;
    auto checkpoint = [&](const std::string& why) {
        if (saved_step == run.progress.step) return;  // nothing new since the last save
        saved_step = run.progress.step;
        run.progress.seconds = seconds_before + session_seconds();
        save_checkpoint(run);
        TrainingEvent e;
        e.kind = TrainingEvent::Kind::checkpoint;
        e.step = run.progress.step;
        e.text = why;
        emit(e);
    };

    TrainingResult result;
    double recent_tokens = 0, recent_seconds = 0;
    std::string stop_reason = "budget";
    while (!budget_reached()) {
        if (stop_requested && stop_requested->load()) {
            stop_reason = "interrupted";
            break;
        }
        const auto t0 = Clock::now();
        const int64_t epoch_before = run.stream->state().epoch;
        const Batch batch = run.stream->next();
        const int64_t t = batch.tgt.size(1);
        const IntTensor tgt_in = batch.tgt.slice_last(0, t - 1), tgt_out = batch.tgt.slice_last(1, t);
        run.optimizer->zero_grad();
        Tensor loss = sequence_loss(run.model->forward(batch.src, tgt_in), tgt_out, o.label_smoothing);
        const double loss_value = loss.item();
        if (!std::isfinite(loss_value)) {
            result.stop_reason = "diverged";
            TrainingEvent e;
            e.kind = TrainingEvent::Kind::message;
            e.step = run.progress.step + 1;
            e.text = "the loss is " + std::to_string(loss_value) + " at step " + std::to_string(run.progress.step + 1) +
                     "; stopping. The last good checkpoint is kept in " + run.dir;
            emit(e);
            break;
        }
        loss.backward();
        if (o.clip_norm > 0) nn::clip_grad_norm(run.model->parameters(), o.clip_norm);
        const double lr = learning_rate(run, run.progress.step + 1);
        run.optimizer->set_lr(lr);
        run.optimizer->step();
        if (run.average) run.average->update();
        run.progress.step++;
        run.progress.loss_sum += loss_value;
        run.progress.loss_steps++;

        const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
        recent_tokens = 0.9 * recent_tokens + static_cast<double>(batch.target_tokens);
        recent_seconds = 0.9 * recent_seconds + dt;
        TrainingEvent e;
        e.kind = TrainingEvent::Kind::step;
        e.step = run.progress.step;
        e.epoch = run.stream->state().epoch;
        e.batches_in_epoch = run.stream->batches_in_epoch();
        e.batch_in_epoch = run.stream->state().next_batch;
        e.loss = loss_value;
        e.learning_rate = lr;
        e.tokens_per_second = recent_seconds > 0 ? recent_tokens / recent_seconds : 0;
        e.elapsed_seconds = session_seconds();
        e.budget_fraction = budget_fraction();
        emit(e);

        const bool epoch_ended = run.stream->state().epoch > epoch_before;
        const bool eval_now = o.eval_every_steps > 0 ? run.progress.step % o.eval_every_steps == 0 : epoch_ended;
        if (eval_now) {
            record_evaluation(true);
            checkpoint(epoch_ended ? "end of epoch" : "evaluation");
        }
    }
    if (result.stop_reason != "diverged") {
        result.stop_reason = stop_reason;
        const bool just_evaluated = !run.progress.history.empty() && run.progress.history.back().step == run.progress.step;
        if (run.progress.step > start_step && !just_evaluated && stop_reason == "budget") record_evaluation(false);
        checkpoint(stop_reason == "interrupted" ? "interrupted" : "end of run");
    }
    result.steps = run.progress.step;
    result.epochs = run.stream->state().epoch;
    result.minutes = (seconds_before + session_seconds()) / 60.0;
    result.best_dev = run.progress.best_dev;
    result.last_dev = run.progress.last_dev;
    result.history = run.progress.history;
    return result;
}

}  // namespace

Dataset load_dataset(const TrainingOptions& options) {
    if (options.task == "g2p") return g2p_dataset(options.dictionary);
    SyntheticOptions synthetic = options.synthetic;
    synthetic.task = options.task;
    Generator gen(options.seed);
    return synthetic_dataset(synthetic, gen);
}

std::vector<std::string> source_symbols(const std::string& task, const std::string& text) {
    std::string lowered = text;
    if (task == "g2p")
        for (char& ch : lowered)
            if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
    return utf8_characters(lowered);
}

EvalResult evaluate(Seq2SeqModel& model, const std::vector<Example>& examples, const Vocabulary& source_vocab,
                    const Vocabulary& target_vocab, const DecodeOptions& decode_options, int64_t batch_size,
                    std::vector<std::vector<std::string>>* predictions) {
    const std::vector<EncodedExample> encoded = encode_for_evaluation(examples, source_vocab, target_vocab);
    BatchOptions batch_options;
    batch_options.max_sentences = batch_size;
    ErrorRates rates;
    if (predictions) predictions->assign(examples.size(), {});
    for (const Batch& batch : make_eval_batches(encoded, batch_options)) {
        const std::vector<Hypothesis> hypotheses = decode(model, batch.src, decode_options);
        for (size_t row = 0; row < hypotheses.size(); ++row) {
            const int64_t index = batch.example_index[row];
            const std::vector<std::string> predicted = target_vocab.decode(hypotheses[row].tokens);
            rates.add(predicted, examples[static_cast<size_t>(index)].references);
            if (predictions) (*predictions)[static_cast<size_t>(index)] = predicted;
        }
    }
    return {rates.wer(), rates.per(), rates.words()};
}

TrainingResult train(const ModelConfig& model_config, const TrainingOptions& options, const std::string& out_dir,
                     const TrainingListener& listener, const std::atomic<bool>* stop_requested) {
    options.validate();
    Run run;
    run.options = options;
    run.dir = out_dir;
    check(!fs::exists(run.model_path()) && !fs::exists(run.training_path()), "train", out_dir,
          " already holds a checkpoint: resume it (--resume) or choose another directory");
    run.data = load_dataset(options);
    check(!run.data.train.empty() && !run.data.dev.empty(), "train", "the task \"", options.task,
          "\" has an empty train or dev split");
    run.source_vocab = source_vocabulary(run.data.train);
    run.target_vocab = target_vocabulary(run.data.train);
    ModelConfig config = model_config;
    config.src_vocab = run.source_vocab.size();
    config.tgt_vocab = run.target_vocab.size();
    if (config.share_embeddings && config.src_vocab != config.tgt_vocab) config.share_embeddings = false;
    Generator init(options.seed);
    run.model = make_model(ModelConfig::from_json(config.to_json()), init);  // validated like a config file
    run.model->random().seed(options.seed ^ 0x9e3779b97f4a7c15ULL);
    run.optimizer = make_optimizer(options, *run.model);
    if (options.average_decay > 0)
        run.average = std::make_unique<nn::WeightAverage>(run.model->named_parameters(), options.average_decay);
    run.stream = std::make_unique<BatchStream>(training_examples(run), options.batches, options.seed);
    // The directory comes last, so that a run refused above (bad data, a bad config, too little
    // memory) leaves nothing behind.
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    check(!ec && fs::is_directory(out_dir), "train", "cannot create the output directory ", out_dir,
          ec ? ": " + ec.message() : "");
    return run_loop(run, listener, stop_requested);
}

TrainingResult resume(const std::string& dir, int64_t epochs, double minutes, int64_t max_steps,
                      const TrainingListener& listener, const std::atomic<bool>* stop_requested) {
    Run run;
    run.dir = dir;
    check(fs::is_directory(dir), "resume", "no checkpoint directory at ", dir);
    check(fs::exists(run.training_path()) && fs::exists(run.model_path()), "resume", dir,
          " has no model.safetensors and training.safetensors to resume from");
    const SafetensorsFile training = SafetensorsFile::load(run.training_path());
    run.options = TrainingOptions::from_json(training.metadata("training"));
    if (epochs > 0 || minutes > 0 || max_steps > 0) {
        run.options.epochs = epochs;
        run.options.minutes = minutes;
        run.options.max_steps = max_steps;
    }
    run.options.validate();
    run.progress = progress_from(training.metadata("progress"), run.training_path());
    LoadedModel loaded = load_model(run.model_path());
    check(loaded.step == run.progress.step, "resume", dir, ": model.safetensors is from step ", loaded.step,
          " but training.safetensors from step ", run.progress.step, " (an interrupted save); cannot resume exactly");
    run.data = load_dataset(run.options);
    run.source_vocab = loaded.source_vocab;
    run.target_vocab = loaded.target_vocab;
    check(run.source_vocab == source_vocabulary(run.data.train) && run.target_vocab == target_vocabulary(run.data.train),
          "resume", "the task's data has changed since ", dir, " was written (its vocabularies differ)");
    run.model = loaded.model;
    run.model->random().set_state(run.progress.random);
    run.optimizer = make_optimizer(run.options, *run.model);
    std::map<std::string, Tensor> optimizer_state, average_state;
    for (const std::string& name : training.names())
        (name.rfind("average", 0) == 0 ? average_state : optimizer_state).emplace(name, training.tensor(name));
    run.optimizer->load_state(optimizer_state);
    if (run.options.average_decay > 0) {
        run.average = std::make_unique<nn::WeightAverage>(run.model->named_parameters(), run.options.average_decay);
        run.average->load_state(average_state);
    }
    run.stream = std::make_unique<BatchStream>(training_examples(run), run.options.batches, run.options.seed);
    run.stream->restore(run.progress.stream);
    return run_loop(run, listener, stop_requested);
}

}  // namespace seqgrad::models
