// The libraries and kernels a process runs with (runtime.h).
#include "seqgrad/core/runtime.h"

#include <sstream>

#include "blas.h"
#include "seqgrad/core/cpu.h"
#include "seqgrad/core/precision.h"
#include "seqgrad/core/threads.h"

#ifdef SEQGRAD_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

extern "C" char* openblas_get_config(void);

namespace seqgrad {

std::string version() { return SEQGRAD_VERSION; }

namespace {

// OpenBLAS's configuration string begins "OpenBLAS 0.3.21 ...": the version is its second word.
std::string openblas_version() {
    const char* config = openblas_get_config();
    std::istringstream words(config ? config : "");
    std::string name, number;
    words >> name >> number;
    return name == "OpenBLAS" && !number.empty() ? number : "(version unknown)";
}

}  // namespace

std::vector<RuntimePart> runtime_parts() {
    std::vector<RuntimePart> parts;
    parts.push_back({"kernels", isa_description()});
    parts.push_back({"products of weights", float32_products_kernel()});
    parts.push_back({"OpenBLAS", openblas_version() + " (" + blas_core_name() + " kernels)"});
#ifdef SEQGRAD_HAVE_DNNL
    const dnnl_version_t* v = dnnl_version();
    parts.push_back({"oneDNN",
                     std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch)});
#else
    parts.push_back({"oneDNN", "none (built without it)"});
#endif
    return parts;
}

std::string runtime_line(const std::vector<RuntimePart>& parts) {
    std::string line = "seqgrad " + version();
    for (const RuntimePart& part : parts) line += "; " + part.name + ": " + part.value;
    return line;
}

}  // namespace seqgrad
