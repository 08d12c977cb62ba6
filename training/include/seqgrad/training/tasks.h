// The tasks a run can name: "g2p" (CMUdict) and the synthetic ones, and how each reads a string
// that a user types.
#pragma once

#include <string>
#include <vector>

#include "seqgrad/training/dataset.h"
#include "seqgrad/training/options.h"

namespace seqgrad::training {

// The dataset a run's options name (the g2p dictionary, or the synthetic task from options.seed).
Dataset load_dataset(const TrainingOptions& options);

// The source symbols a task reads from a string typed by a user (g2p: the lower-cased characters).
std::vector<std::string> source_symbols(const std::string& task, const std::string& text);

}  // namespace seqgrad::training
