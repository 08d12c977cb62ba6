// The tasks a run can name (tasks.h).
#include "seqgrad/training/tasks.h"

#include "seqgrad/training/text.h"

namespace seqgrad::training {

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

}  // namespace seqgrad::training
