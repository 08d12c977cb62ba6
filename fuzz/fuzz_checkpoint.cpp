// Checkpoint files: a model file (config, tokenizers, vocabularies, weights) and a training state
// (options, progress, optimizer and average tensors).
#include "fuzz_common.h"
#include "seqgrad/text/model_file.h"
#include "seqgrad/training/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = seqgrad_fuzz::as_file(data, size, ".safetensors");
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::text::load_model(path); });
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::training::load_training_state(path); });
    return 0;
}
