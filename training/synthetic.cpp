// The synthetic copy, reverse and sort tasks.
#include "seqgrad/training/synthetic.h"

#include <algorithm>

#include "seqgrad/core/error.h"

namespace seqgrad::training {

bool is_synthetic_task(std::string_view task) { return task == "copy" || task == "reverse" || task == "sort"; }

Dataset synthetic_dataset(const SyntheticOptions& options, Generator& gen) {
    const char* op = "synthetic_dataset";
    check(is_synthetic_task(options.task), op, "unknown task \"", options.task, "\" (copy, reverse or sort)");
    check(options.vocab_size >= 1 && options.vocab_size <= 26, op, "vocab_size must be in 1..26, got ",
          options.vocab_size);
    check(options.min_length >= 1 && options.min_length <= options.max_length, op,
          "lengths must satisfy 1 <= min_length <= max_length, got ", options.min_length, "..", options.max_length);
    check(options.train_size >= 0 && options.dev_size >= 0 && options.test_size >= 0, op,
          "split sizes must not be negative");

    const auto make_split = [&](int64_t size) {
        std::vector<Example> examples;
        examples.reserve(static_cast<size_t>(size));
        const auto lengths = static_cast<uint64_t>(options.max_length - options.min_length + 1);
        for (int64_t n = 0; n < size; ++n) {
            const int64_t length = options.min_length + static_cast<int64_t>(gen.below(lengths));
            Example example;
            for (int64_t i = 0; i < length; ++i) {
                const char symbol = static_cast<char>('a' + gen.below(static_cast<uint64_t>(options.vocab_size)));
                example.name += symbol;
                example.source.emplace_back(1, symbol);
            }
            std::vector<std::string> answer = example.source;
            if (options.task == "reverse") std::reverse(answer.begin(), answer.end());
            if (options.task == "sort") std::sort(answer.begin(), answer.end());
            example.references.push_back(std::move(answer));
            examples.push_back(std::move(example));
        }
        return examples;
    };
    Dataset dataset;
    dataset.task = options.task;
    dataset.train = make_split(options.train_size);
    dataset.dev = make_split(options.dev_size);
    dataset.test = make_split(options.test_size);
    return dataset;
}

}  // namespace seqgrad::training
