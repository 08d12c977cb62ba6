// The instruction-set level of seqgrad's kernels: what the CPU has, capped by SEQGRAD_MAX_CPU_ISA,
// settled once per process (cpu.h; the dispatch itself is isa_dispatch.h).
#include "seqgrad/core/cpu.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "seqgrad/core/error.h"

namespace seqgrad {
namespace {

constexpr const char* kCapVariable = "SEQGRAD_MAX_CPU_ISA";

struct Resolved {
    IsaLevel level = IsaLevel::portable;
    std::string cap;    // the variable's value, "" when unset
    std::string error;  // why the cap was refused, "" when it was not
};

bool parse_level(const std::string& name, IsaLevel& level) {
    for (IsaLevel l : {IsaLevel::portable, IsaLevel::avx2, IsaLevel::avx512}) {
        std::string upper = isa_level_name(l);
        for (char& c : upper) c = static_cast<char>(c - ('a' <= c && c <= 'z' ? 'a' - 'A' : 0));
        if (name == isa_level_name(l) || name == upper) {
            level = l;
            return true;
        }
    }
    return false;
}

const Resolved& resolved() {
    static const Resolved r = [] {
        Resolved out;
        out.level = cpu_isa_level();
        const char* cap = std::getenv(kCapVariable);
        if (cap == nullptr || *cap == '\0') return out;
        out.cap = cap;
        IsaLevel wanted{};
        if (!parse_level(out.cap, wanted)) {
            out.error = std::string(kCapVariable) + "='" + out.cap + "' is not one of portable, avx2, avx512";
        } else if (static_cast<int>(wanted) > static_cast<int>(out.level)) {
            out.error = std::string(kCapVariable) + "=" + out.cap + " asks for a level this CPU lacks: it has " +
                        isa_level_name(out.level);
        } else {
            out.level = wanted;
        }
        return out;
    }();
    return r;
}

}  // namespace

const char* isa_level_name(IsaLevel level) {
    switch (level) {
        case IsaLevel::avx512: return "avx512";
        case IsaLevel::avx2: return "avx2";
        case IsaLevel::portable: break;
    }
    return "portable";
}

IsaLevel cpu_isa_level() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // __builtin_cpu_supports also asks whether the operating system saves the wide registers.
    static const IsaLevel level = [] {
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
            return IsaLevel::avx512;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
            return IsaLevel::avx2;
        return IsaLevel::portable;
    }();
    return level;
#else
    return IsaLevel::portable;
#endif
}

namespace {
std::atomic<int> chosen_level{-1};  // the level set_isa_level() chose, or -1 for max_isa_level()
}  // namespace

IsaLevel max_isa_level() {
    const Resolved& r = resolved();
    if (!r.error.empty()) throw Error("cpu level: " + r.error);
    return r.level;
}

IsaLevel isa_level() {
    const int chosen = chosen_level.load(std::memory_order_relaxed);
    return chosen >= 0 ? static_cast<IsaLevel>(chosen) : max_isa_level();
}

void set_isa_level(IsaLevel level) {
    const IsaLevel top = max_isa_level();
    check(static_cast<int>(level) <= static_cast<int>(top), "set_isa_level", "level ", isa_level_name(level),
          " is above this process's highest, ", isa_level_name(top),
          cpu_isa_level() == top ? " (this CPU's)" : " (capped by SEQGRAD_MAX_CPU_ISA)");
    chosen_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

std::string isa_description() {
    const Resolved& r = resolved();
    if (!r.error.empty()) return "refused (" + r.error + ")";
    static const char* what[] = {"SSE4.2", "AVX2 + FMA", "AVX-512"};
    const IsaLevel level = isa_level();
    std::string out = std::string(isa_level_name(level)) + " (" + what[static_cast<int>(level)];
    if (r.level != cpu_isa_level())
        out +=
            std::string("; this CPU: ") + isa_level_name(cpu_isa_level()) + ", capped by " + kCapVariable + "=" + r.cap;
    if (level != r.level) out += std::string("; set below ") + isa_level_name(r.level) + " by set_isa_level";
    return out + ")";
}

}  // namespace seqgrad
