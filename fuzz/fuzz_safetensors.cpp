// safetensors files: the header's length, JSON, dtypes, shapes and offsets, the metadata.
#include <vector>

#include "fuzz_common.h"
#include "seqgrad/core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                                       reinterpret_cast<const std::byte*>(data) + size);
    seqgrad_fuzz::refused_or_read([&] {
        const seqgrad::SafetensorsFile file = seqgrad::SafetensorsFile::parse(bytes, "input");
        for (const std::string& name : file.names()) (void)file.entry(name);
        (void)file.serialize();
    });
    return 0;
}
