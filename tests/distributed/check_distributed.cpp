// The data-parallel proof's two halves (run by check_distributed.sh):
//
//   check_distributed train MODEL DIR STEPS [blocking | sgd]
//       trains a small MODEL ("transformer", "attn_seq2seq" or "seq2seq" on the reverse task; "gpt"
//       on a text written here, windows of 17 tokens) for STEPS steps into DIR, as one process or,
//       under mpirun, as several; rank 0 writes each step's loss (the global batch's) to
//       DIR/losses.txt and the number of ranks to DIR/ranks.txt.
//       No dropout, so that every rank's share is computed as in one process; clipping, label
//       smoothing, two dev evaluations with a rate decay, and the weight average are all on. The
//       gradients are summed during the backward pass (GradientReducer), or with `blocking` after
//       it (all_reduce_gradients). With `sgd`, plain SGD without clipping: Adam's steps and
//       clipping do not change with the gradients' scale, so they would hide a wrong one.
//   check_distributed compare DIR_A DIR_B TOLERANCE
//       compares the two runs' losses and final weights (model.safetensors): the largest
//       difference of a loss, relative to the loss, and of a weight, relative to the largest weight
//       of its tensor, must be at most TOLERANCE; 0 asks for bit-identical runs.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "seqgrad/core/safetensors.h"
#include "seqgrad/core/threads.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/distributed.h"
#include "seqgrad/training/recipe.h"
#include "seqgrad/training/task.h"
#include "seqgrad/training/trainer.h"

namespace {

using namespace seqgrad;

int train(const std::string& model, const std::string& dir, int64_t steps, const std::string& variant) {
    const nn::Distributed& group = nn::Distributed::current();
    set_num_threads(1);  // one thread a rank, and one for the single process
    models::ModelConfig config = training::recipe(model).model;
    config.update_from_json(
        model == "transformer" ? R"({"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "dropout": 0})"
        : model == "gpt" ? R"({"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64, "dropout": 0, "context": 16})"
                         : R"({"hidden_size": 32, "num_layers": 1, "dropout": 0})");
    training::TrainingOptions options;
    if (model == "gpt") {
        // The same text for every rank, each from its own file (no rank waits for another's).
        options = training::recipe("gpt").training;
        options.task = "text";
        options.text = dir + ".rank" + std::to_string(group.rank()) + ".txt";
        {
            std::ofstream text(options.text);
            for (int i = 0; i < 300; ++i) text << "line " << i % 23 << ": the cat sat on the mat, and the dog ran.\n";
            if (!text.good()) return 1;
        }
    } else {
        options.task = "reverse";
        options.synthetic.train_size = 2000;
        options.synthetic.dev_size = 20;
        options.synthetic.test_size = 20;
        options.synthetic.max_length = 6;
    }
    options.batches.max_sentences = 31;  // shares of 15 and 16 rows on 2 ranks
    options.schedule = "constant";
    options.lr = 0.003;
    options.lr_decay = 0.5;
    options.average_decay = 0.99;
    options.clip_norm = 1.0f;
    options.label_smoothing = 0.1f;
    options.max_steps = steps;
    options.eval_every_steps = steps / 2;
    options.eval_max_len = 8;
    options.seed = 7;
    options.overlap_gradients = variant != "blocking";
    if (variant == "sgd" || variant == "sgd_accumulate") {
        options.optimizer = "sgd";
        options.lr = 0.1;
        options.clip_norm = 0;
    }
    // Each rank's share cut again into micro-batches of several lengths: the gradients still weigh
    // by tokens, across micro-batches and ranks alike.
    if (variant == "sgd_accumulate") options.accumulate = 3;
    std::vector<double> losses;
    training::train(config, options, dir, [&losses](const training::TrainingEvent& e) {
        if (e.kind == training::TrainingEvent::Kind::step) losses.push_back(e.loss);
    });
    if (!group.is_root()) return 0;
    std::ofstream out(dir + "/losses.txt");
    for (double loss : losses) out << std::hexfloat << loss << "\n";  // exact, for the bitwise check
    std::ofstream ranks(dir + "/ranks.txt");
    ranks << group.size() << "\n";
    return out.good() && ranks.good() ? 0 : 1;
}

std::vector<double> read_losses(const std::string& dir) {
    std::ifstream in(dir + "/losses.txt");
    std::vector<double> losses;
    std::string line;
    while (std::getline(in, line)) losses.push_back(std::strtod(line.c_str(), nullptr));
    return losses;
}

int compare(const std::string& a, const std::string& b, double tolerance) {
    const std::vector<double> la = read_losses(a), lb = read_losses(b);
    if (la.empty() || la.size() != lb.size()) {
        std::printf("losses: %zu steps in %s, %zu in %s\n", la.size(), a.c_str(), lb.size(), b.c_str());
        return 1;
    }
    double loss_diff = 0;
    for (size_t i = 0; i < la.size(); ++i)
        loss_diff = std::max(loss_diff, std::fabs(la[i] - lb[i]) / std::max(std::fabs(la[i]), 1e-30));
    const SafetensorsFile wa = SafetensorsFile::load(a + "/model.safetensors");
    const SafetensorsFile wb = SafetensorsFile::load(b + "/model.safetensors");
    double weight_diff = 0, noise = 0;
    std::string worst;
    if (wa.names() != wb.names()) {
        std::printf("the two runs' model.safetensors hold different tensors\n");
        return 1;
    }
    for (const std::string& name : wa.names()) {
        const Tensor ta = wa.tensor(name), tb = wb.tensor(name);
        if (ta.shape() != tb.shape()) {
            std::printf("%s: shapes differ\n", name.c_str());
            return 1;
        }
        double largest = 0, diff = 0;
        for (int64_t i = 0; i < ta.numel(); ++i) {
            largest = std::max(largest, static_cast<double>(std::fabs(ta.data()[i])));
            diff = std::max(diff, static_cast<double>(std::fabs(ta.data()[i] - tb.data()[i])));
        }
        const double relative = largest > 0 ? diff / largest : diff;
        if (std::getenv("CHECK_DISTRIBUTED_VERBOSE"))
            std::printf("  %-50s %.3g (largest %.3g)\n", name.c_str(), relative, largest);
        // The keys' bias of attention adds q.b to every score of a query alike, which softmax
        // ignores: its gradient is zero in exact arithmetic and rounding noise in float32, which
        // Adam (dividing by that noise's own scale) turns into steps of the full rate. Its values
        // are noise in both runs; they are held to bit-identity between runs of the same ranks only.
        if (tolerance > 0 && name.ends_with("wk.bias")) {
            noise = std::max(noise, relative);
            continue;
        }
        if (relative >= weight_diff) {
            weight_diff = relative;
            worst = name;
        }
    }
    std::printf("%zu steps: largest loss difference %.3g (relative), largest weight difference %.3g (relative to "
                "its tensor's largest weight, in %s); tolerance %.3g\n",
                la.size(), loss_diff, weight_diff, worst.c_str(), tolerance);
    if (noise > 0) std::printf("(the attention keys' biases, rounding noise, differ by up to %.3g)\n", noise);
    const bool ok = tolerance == 0 ? loss_diff == 0 && weight_diff == 0
                                   : loss_diff <= tolerance && weight_diff <= tolerance;
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    std::optional<nn::Distributed> group;
    try {
        group.emplace(&argc, &argv);
        const std::string mode = argc > 1 ? argv[1] : "";
        const std::string variant = argc == 6 ? argv[5] : "";
        const bool known = variant == "blocking" || variant == "sgd" || variant == "sgd_accumulate";
        if (mode == "train" && (argc == 5 || (argc == 6 && known)))
            return train(argv[2], argv[3], std::stoll(argv[4]), variant);
        if (mode == "compare" && argc == 5) return compare(argv[2], argv[3], std::stod(argv[4]));
        std::fprintf(stderr, "usage: check_distributed train MODEL DIR STEPS [blocking | sgd | sgd_accumulate] | "
                             "compare DIR_A DIR_B "
                             "TOLERANCE\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "check_distributed: %s\n", e.what());
        if (group && group->size() > 1) group->abort(1);  // the other ranks must not wait for this one
        return 1;
    }
}
