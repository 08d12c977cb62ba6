// What this process computes with, named at run time, so that a figure carries its machine:
// seqgrad's version and kernel level, the kernels of the products of weights, and the versions
// and kernels of the libraries found (OpenBLAS, oneDNN). `seqgrad --version` prints them, and the
// same line heads seqgrad_bench's output and each training run's log (nn's adds MPI).
#pragma once

#include <string>
#include <vector>

namespace seqgrad {

std::string version();  // "0.1.0"

struct RuntimePart {
    std::string name;   // "kernels", "products of weights", "OpenBLAS", "oneDNN"
    std::string value;  // "avx512 (AVX-512)", "oneDNN brg:avx512_core", "0.3.21 (Cooperlake kernels)", ...
};
std::vector<RuntimePart> runtime_parts();

// "seqgrad 0.1.0; kernels: avx512 (AVX-512); products of weights: ...; OpenBLAS: ...; ...": the
// parts on one line.
std::string runtime_line(const std::vector<RuntimePart>& parts);

}  // namespace seqgrad
