// A task's splits.
#include "seqgrad/training/dataset.h"

#include "seqgrad/core/error.h"

namespace seqgrad::training {

const char* split_name(Split split) {
    switch (split) {
        case Split::train: return "train";
        case Split::dev: return "dev";
        case Split::test: return "test";
    }
    return "?";
}

Split split_by_hash(std::string_view source) {
    const uint32_t bucket = fnv1a_32(source) % 100;
    if (bucket < 90) return Split::train;
    if (bucket < 95) return Split::dev;
    return Split::test;
}

const std::vector<Example>& Dataset::split(std::string_view name) const {
    if (name == "train") return train;
    if (name == "dev") return dev;
    if (name == "test") return test;
    throw Error(detail::concat("Dataset::split: unknown split \"", name, "\" (train, dev or test)"));
}

}  // namespace seqgrad::training
