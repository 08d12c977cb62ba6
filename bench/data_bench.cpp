// Reading one's own data at scale: a generated corpus of one million pairs, 40 characters a side,
// read, tokenized (characters), split by hash, counted into vocabularies, encoded, and planned into
// an epoch of length-bucketed batches, the way `seqgrad train --train` prepares it.
//
//   data/corpus/1m_pairs   counters: pairs_per_second, peak_rss_mib (the process's peak resident
//                          memory, so run it alone: --benchmark_filter=data/corpus)
//
// The corpus is written once to build/bench-data/corpus-1m.tsv (about 82 MB) and reused.
#include <filesystem>
#include <fstream>
#include <string>

#include "bench_common.h"
#include "seqgrad/core/random.h"
#include "seqgrad/training/data.h"

namespace seqgrad_bench {
namespace {

constexpr int64_t kPairs = 1000000;
constexpr int64_t kSideLength = 40;

// Random words of 2 to 9 letters, separated by spaces, 40 characters a side.
std::string corpus_path() {
    const std::filesystem::path path = std::filesystem::path("build") / "bench-data" / "corpus-1m.tsv";
    if (std::filesystem::exists(path)) return path.string();
    std::filesystem::create_directories(path.parent_path());
    const std::string partial = path.string() + ".partial";
    {
        std::ofstream out(partial, std::ios::binary);
        seqgrad::Generator gen(2024);
        std::string line;
        const auto side = [&] {
            std::string text;
            while (static_cast<int64_t>(text.size()) < kSideLength) {
                if (!text.empty()) text += ' ';
                const auto letters = 2 + gen.below(8);
                for (uint64_t i = 0; i < letters; ++i) text += static_cast<char>('a' + gen.below(26));
            }
            text.resize(kSideLength);
            if (text.back() == ' ') text.back() = 'e';
            return text;
        };
        for (int64_t i = 0; i < kPairs; ++i) {
            line = side();
            line += '\t';
            line += side();
            line += '\n';
            out << line;
        }
    }
    std::filesystem::rename(partial, path);
    return path.string();
}

// The process's peak resident memory in MiB (VmHWM).
double peak_rss_mib() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return 0;
}

void corpus_million(benchmark::State& state) {
    seqgrad::training::TrainingOptions options;
    options.task = "corpus";
    options.train_files = {corpus_path()};
    options.max_steps = 1;
    int64_t batches = 0;
    for (auto _ : state) {
        seqgrad::training::PairData data = seqgrad::training::prepare_pairs(options);
        seqgrad::training::BatchStream stream(std::move(data.train), options.batches, options.seed);
        batches = stream.batches_in_epoch();
        for (int i = 0; i < 10; ++i) benchmark::DoNotOptimize(stream.next());
    }
    state.counters["batches"] = static_cast<double>(batches);
    set_plain_rate_counter(state, "pairs_per_second", static_cast<double>(kPairs));
    state.counters["peak_rss_mib"] = peak_rss_mib();
}

}  // namespace

void register_data_benchmarks() {
    benchmark::RegisterBenchmark("data/corpus/1m_pairs", corpus_million)
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kSecond);
}

}  // namespace seqgrad_bench
