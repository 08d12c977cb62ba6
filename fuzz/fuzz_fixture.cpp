// `seqgrad check`'s fixture reader: a PyTorch-written fixture rebuilt into a model (or a layer) and
// compared tensor by tensor.
#include "fuzz_common.h"
#include "seqgrad/models/parity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = seqgrad_fuzz::as_file(data, size, ".safetensors");
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::models::check_fixture(path); });
    return 0;
}
