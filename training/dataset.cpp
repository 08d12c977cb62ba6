// A task's splits.
#include "seqgrad/training/dataset.h"

#include "seqgrad/core/error.h"

namespace seqgrad::training {

const std::vector<Example>& Dataset::split(std::string_view name) const {
    if (name == "train") return train;
    if (name == "dev") return dev;
    if (name == "test") return test;
    throw Error(detail::concat("Dataset::split: unknown split \"", name, "\" (train, dev or test)"));
}

}  // namespace seqgrad::training
