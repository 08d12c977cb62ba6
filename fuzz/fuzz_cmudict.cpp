// The CMUdict reader: headwords, variants, phones, stress marks, UTF-8, line endings.
#include "fuzz_common.h"
#include "seqgrad/training/g2p.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = seqgrad_fuzz::as_file(data, size, ".dict");
    seqgrad_fuzz::refused_or_read([&] { (void)seqgrad::training::read_dictionary(path); });
    return 0;
}
