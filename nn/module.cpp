// Module: registration of parameters, buffers and submodules; dotted names; state_dict and its
// checked loading; train/eval and zero_grad over the tree.
#include "seqgrad/nn/module.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

namespace seqgrad::nn {

void Module::check_new_name(const std::string& name) const {
    check(!name.empty() && name.find('.') == std::string::npos, "Module::register", "name '", name,
          "' must be non-empty and contain no '.'");
    auto taken = [&](const auto& entries, auto name_of) {
        return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return name_of(e) == name; });
    };
    const bool used = taken(parameters_, [](const auto& p) { return p.first; }) ||
                      taken(buffers_, [](const Buffer& b) { return b.name; }) ||
                      taken(children_, [](const auto& c) { return c.first; });
    check(!used, "Module::register", "name '", name, "' is already registered in this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
    check_new_name(name);
    check(value.defined(), "Module::register_parameter", "parameter '", name, "' is undefined");
    check(value.is_leaf(), "Module::register_parameter", "parameter '", name,
          "' is the result of an operation; register a leaf (detach() it)");
    value.set_requires_grad(true);
    parameters_.emplace_back(name, value);
    return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
    check_new_name(name);
    check(value.defined(), "Module::register_buffer", "buffer '", name, "' is undefined");
    buffers_.push_back({name, value, persistent});
    return value;
}

template <typename Visit>
void Module::walk(const std::string& prefix, Visit&& visit) const {
    visit(prefix, *this);
    for (const auto& [name, child] : children_) child->walk(prefix + name + ".", visit);
}

NamedTensors Module::named_parameters() const {
    NamedTensors out;
    walk("", [&](const std::string& prefix, const Module& m) {
        for (const auto& [name, p] : m.parameters_) out.emplace_back(prefix + name, p);
    });
    return out;
}

std::vector<Tensor> Module::parameters() const {
    std::vector<Tensor> out;
    for (auto& [name, p] : named_parameters()) out.push_back(p);
    return out;
}

NamedTensors Module::named_buffers() const {
    NamedTensors out;
    walk("", [&](const std::string& prefix, const Module& m) {
        for (const Buffer& b : m.buffers_) out.emplace_back(prefix + b.name, b.value);
    });
    return out;
}

NamedTensors Module::state_dict() const {
    NamedTensors out;
    walk("", [&](const std::string& prefix, const Module& m) {
        for (const auto& [name, p] : m.parameters_) out.emplace_back(prefix + name, p);
        for (const Buffer& b : m.buffers_)
            if (b.persistent) out.emplace_back(prefix + b.name, b.value);
    });
    return out;
}

int64_t Module::num_parameters() const {
    int64_t n = 0;
    for (const auto& [name, p] : named_parameters()) n += p.numel();
    return n;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
    // Check everything first, so a bad checkpoint changes nothing and the error names every
    // problem at once.
    const NamedTensors own = state_dict();
    std::vector<std::string> missing, unexpected, misshaped;
    std::set<std::string> own_names;
    for (const auto& [name, target] : own) {
        own_names.insert(name);
        auto it = state.find(name);
        if (it == state.end() || !it->second.defined()) {
            std::ostringstream line;
            line << name << ' ' << target.shape();
            missing.push_back(line.str());
        } else if (it->second.shape() != target.shape()) {
            std::ostringstream line;
            line << name << " expects " << target.shape() << ", got " << it->second.shape();
            misshaped.push_back(line.str());
        }
    }
    for (const auto& [name, value] : state)
        if (!own_names.count(name)) unexpected.push_back(name);

    if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
        std::ostringstream message;
        message << "load_state_dict: the state does not fit the module (" << missing.size() << " missing, "
                << unexpected.size() << " unexpected, " << misshaped.size() << " with the wrong shape)";
        auto list = [&](const char* title, const std::vector<std::string>& names) {
            for (const std::string& n : names) message << "\n  " << title << ": " << n;
        };
        list("missing", missing);
        list("unexpected", unexpected);
        list("wrong shape", misshaped);
        throw Error(message.str());
    }

    for (const auto& [name, target] : own) {
        const Tensor& source = state.at(name);
        if (source.numel() == 0 || source.data() == target.data()) continue;  // e.g. its own state
        Tensor into = target;  // a handle to the registered tensor: writing it writes the module's
        std::memcpy(into.data(), source.data(), static_cast<size_t>(source.numel()) * sizeof(float));
    }
    if (packed_) pack_weights(precision_);  // the packed snapshot follows the new weights
}

void Module::train(bool on) {
    if (on && packed_) unpack_weights();  // weights about to change: the snapshot would go stale
    training_ = on;
    for (auto& [name, child] : children_) child->train(on);
}

void Module::pack_weights(Precision precision) {
    check(precision != Precision::int8 || packing_available(Precision::int8), "Module::pack_weights",
          "int8 weights need oneDNN, and this build of seqgrad has none (install Debian's libdnnl-dev and rebuild)");
    if (precision == Precision::bf16) {
        const std::string why = bf16_unavailable_reason();
        check(why.empty(), "Module::pack_weights", why);
    }
    if (!packing_available(precision)) {  // float32 on a CPU or build where sgemm is as good
        unpack_weights();
        return;
    }
    set_packed(precision);
    packed_ = true;
    precision_ = precision;
    for (auto& [name, child] : children_) child->pack_weights(precision);
}

void Module::unpack_weights() {
    set_packed(std::nullopt);
    packed_ = false;
    for (auto& [name, child] : children_) child->unpack_weights();
}

void Module::zero_grad() {
    for (auto& [name, p] : named_parameters()) p.zero_grad();
}

}  // namespace seqgrad::nn
