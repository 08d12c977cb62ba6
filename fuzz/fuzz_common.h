// What the fuzz harnesses share. Each harness feeds libFuzzer's bytes to one reader of outside
// data and lets only seqgrad::Error pass: a crash, a sanitizer report, a hang or any other
// exception is a finding. Readers that take a path read the bytes from a file of this process.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "seqgrad/core/error.h"

namespace seqgrad_fuzz {

// Writes the input to a file of this process (the same path every time, removed at exit) and
// returns the path.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& suffix) {
    struct Scratch {
        std::string path;
        ~Scratch() { std::remove(path.c_str()); }
    };
    static const Scratch scratch{"/tmp/seqgrad_fuzz_" + std::to_string(::getpid()) + suffix};
    const std::string& path = scratch.path;
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    return path;
}

// Runs `read`; an Error is the reader's refusal, which is what bad input must get.
template <typename F>
void refused_or_read(F&& read) {
    try {
        read();
    } catch (const seqgrad::Error&) {}
}

}  // namespace seqgrad_fuzz
