// `seqgrad curves RUN_DIR... --out F.svg`: the dev score of training runs (their task's metric) against
// training time, one line per run, from the history each run keeps in its training state.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/model.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/task.h"
#include "svg.h"

namespace seqgrad::cli {
namespace {

namespace fs = std::filesystem;

struct CurvesFlags {
    std::vector<std::string> runs;
    std::string out;
    std::string title = "Dev WER against training time";
};

struct RunCurve {
    std::string directory;
    std::string model;               // "transformer", or the directory's name
    std::string metric;              // its task's dev metric ("WER")
    std::vector<svg::Point> points;  // (minutes, the task's dev score)
};

// The directory's own name, also for "runs/t1/".
std::string directory_name(const std::string& directory) {
    fs::path path = fs::path(directory).lexically_normal();
    if (path.filename().empty()) path = path.parent_path();
    return path.filename().string();
}

// The kind of model the run trained (its model.safetensors' config), or "" if there is none to read.
std::string model_name_of(const std::string& directory) {
    const training::CheckpointDir dir(directory);
    if (!dir.has_model()) return "";
    try {
        return models::ModelConfig::from_json(SafetensorsFile::load(dir.model_file()).metadata("config")).model;
    } catch (const Error&) {
        return "";
    }
}

RunCurve read_run(const std::string& directory) {
    check(fs::is_directory(directory), "curves", directory, " is not a directory");
    const training::CheckpointDir dir(directory);
    check(dir.has_training_state(), "curves", directory, " has no training state (is it a training run's directory?)");
    RunCurve run;
    run.directory = directory;
    run.model = model_name_of(directory);
    if (run.model.empty()) run.model = directory_name(directory);
    const training::TrainingState state = training::load_training_state(dir.training_file());
    const std::unique_ptr<training::Evaluator> evaluator = training::task(state.options.task).evaluator(state.options);
    run.metric = evaluator->metric();
    for (const training::HistoryEntry& entry : state.progress.history) {
        const double score = evaluator->value(entry.dev);
        if (std::isfinite(score)) run.points.push_back({entry.minutes, score});  // NaN: nothing was scored
    }
    return run;
}

void run_curves(const CurvesFlags& flags) {
    std::vector<RunCurve> runs;
    for (const std::string& directory : flags.runs) {
        RunCurve run = read_run(directory);
        if (run.points.empty())
            std::fprintf(stderr, "note: %s has no dev evaluation yet; left out\n", directory.c_str());
        else runs.push_back(std::move(run));
    }
    check(!runs.empty(), "curves", "no run has a dev evaluation to draw");
    for (const RunCurve& run : runs)
        check(run.metric == runs.front().metric, "curves", run.directory, " measures dev ", run.metric, " but ",
              runs.front().directory, " dev ", runs.front().metric, ": one chart cannot show both");

    // Runs of the same model are told apart by their directories.
    std::map<std::string, int> runs_of_model;
    for (const RunCurve& run : runs) ++runs_of_model[run.model];
    svg::LineChart chart;
    chart.title = flags.title;
    chart.x_label = "training time (minutes)";
    chart.y_label = "dev " + runs.front().metric + (runs.front().metric == "WER" ? " (%)" : "");
    size_t points = 0;
    for (const RunCurve& run : runs) {
        const bool ambiguous = runs_of_model[run.model] > 1 && run.model != directory_name(run.directory);
        chart.series.push_back({ambiguous ? run.model + " (" + directory_name(run.directory) + ")" : run.model,
                                run.points});
        points += run.points.size();
    }
    svg::write_file(flags.out, svg::line_chart_svg(chart));
    std::printf("wrote %s (%zu runs, %zu points)\n", flags.out.c_str(), runs.size(), points);
}

}  // namespace

void add_curves_command(CLI::App& app) {
    auto flags = std::make_shared<CurvesFlags>();
    CLI::App* cmd =
        app.add_subcommand("curves", "Draw training runs' dev score (WER, loss) against training time (SVG chart)");
    cmd->footer("Reads the dev evaluations each run directory keeps in its training state and draws the task's dev "
                "score (WER in %, or loss) against training minutes (all sessions), one line per run, labelled by the "
                "run's model (and its directory when two runs share a model).");
    cmd->add_option("runs", flags->runs, "Training run directories")->required();
    cmd->add_option("--out", flags->out, "The SVG file to write")->required();
    cmd->add_option("--title", flags->title, "The chart's title")->capture_default_str();
    cmd->callback([flags] { run_curves(*flags); });
}

}  // namespace seqgrad::cli
