// Config JSON: a model config (each kind's keys and checks), training options, a run's progress.
#include <string>

#include "fuzz_common.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/training/checkpoint.h"
#include "seqgrad/training/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    seqgrad_fuzz::refused_or_read([&] {
        const seqgrad::models::ModelConfig config = seqgrad::models::ModelConfig::from_json(text, false);
        (void)seqgrad::models::ModelConfig::from_json(config.to_json());  // what it writes reads back
    });
    seqgrad_fuzz::refused_or_read([&] {
        seqgrad::models::ModelConfig config = seqgrad::models::model_kind("transformer").defaults();
        config.src_vocab = config.tgt_vocab = 8;
        config.update_from_json(text);
    });
    seqgrad_fuzz::refused_or_read([&] {
        const auto options = seqgrad::training::TrainingOptions::from_json(text);
        options.validate();
        (void)seqgrad::training::TrainingOptions::from_json(options.to_json());
    });
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::training::Progress::from_json(text); });
    return 0;
}
