// Module: the base of every layer and model. It owns named parameters, buffers and submodules,
// so that named_parameters() and state_dict() give PyTorch's dotted names (docs/parity.md), and
// load_state_dict() can check a checkpoint against them. ModuleList numbers its children as
// PyTorch's nn.ModuleList does ("encoder_layers.0.attention.wq.weight").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "seqgrad/core/packed.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad::nn {

// Tensors by name, in a meaningful order (registration order, PyTorch's).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A layer or a model. A subclass registers what it owns in its constructor:
//
//     weight = register_parameter("weight", Tensor::zeros({out, in}));
//     wq = register_module("wq", std::make_shared<Linear>(d, d, gen));
//
// and keeps the returned handle as a member for its forward(). The handle and the registry refer
// to the same tensor, so load_state_dict() and the optimizers, which write into the registered
// tensors in place, are seen by forward() at once. Modules are held by std::shared_ptr.
//
// Each subclass has its own forward(...) with the arguments it needs; Module does not impose one.
class Module {
public:
    Module() = default;
    virtual ~Module() = default;
    Module(const Module&) = delete;  // parameters are shared handles: a copy would alias them
    Module& operator=(const Module&) = delete;

    // ---- registration (names are unique within a module and contain no '.') ----

    // Makes `value` a parameter: a leaf that requires grad. Returns the registered handle.
    Tensor register_parameter(const std::string& name, Tensor value);
    // State that is not trained (the sinusoidal positional table). Buffers are not parameters;
    // they appear in state_dict() only when persistent.
    Tensor register_buffer(const std::string& name, Tensor value, bool persistent = false);
    template <typename M>
    std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
        check_new_name(name);
        check(module != nullptr, "Module::register_module", "submodule '", name, "' is null");
        children_.emplace_back(name, module);
        return module;
    }

    // ---- what the module holds, recursively, with dotted names ----

    // PyTorch's order: a module's own parameters, then each submodule's in registration order.
    NamedTensors named_parameters() const;
    std::vector<Tensor> parameters() const;
    NamedTensors named_buffers() const;  // all buffers, persistent or not
    // Parameters and persistent buffers, in PyTorch's state_dict order.
    NamedTensors state_dict() const;
    const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
    int64_t num_parameters() const;  // total number of elements

    // Copies every tensor of `state` into the tensor of the same name, in place (optimizers that
    // hold the parameters keep working). The names must be exactly those of state_dict() and the
    // shapes must agree; otherwise nothing is copied and one Error lists every missing,
    // unexpected and misshaped name.
    void load_state_dict(const std::map<std::string, Tensor>& state);

    // ---- modes and gradients ----

    // Training mode (the default) or evaluation mode, for this module and all below it. Only
    // dropout behaves differently.
    void train(bool on = true);
    void eval() { train(false); }
    bool is_training() const { return training_; }
    // Drops every parameter's gradient (grad() becomes undefined), as PyTorch's set_to_none.
    void zero_grad();

    // ---- packed weights for inference (core/packed.h) ----

    // Packs, once, the weights of every layer below that multiplies by a weight matrix (Linear, the
    // Transformer's output projection) for oneDNN's kernels; their forward() then uses the packed
    // weights whenever grad mode is off (NoGradGuard), and the float32 weights otherwise.
    //   float32: the same arithmetic, faster; done only where packing_available(float32), a no-op
    //            elsewhere (the layers stay on sgemm).
    //   int8:    quantized weights and products, faster still, within rounding of float32; an
    //            Error without oneDNN.
    // The packed weights are a snapshot: load_state_dict() packs again, and training mode (train())
    // drops them, so pack once the weights are final. unpack_weights() drops them.
    void pack_weights(Precision precision = Precision::float32);
    void unpack_weights();
    bool weights_packed() const { return packed_; }
    Precision packed_precision() const { return precision_; }  // when weights_packed()

protected:
    // What pack_weights() and unpack_weights() do to this module alone: build (precision given) or
    // drop (nullopt) its own packed weights.
    virtual void set_packed(std::optional<Precision> precision) { (void)precision; }

private:
    struct Buffer {
        std::string name;
        Tensor value;
        bool persistent;
    };
    void check_new_name(const std::string& name) const;
    // Walks this module and its submodules depth-first, calling visit(prefix, module).
    template <typename Visit>
    void walk(const std::string& prefix, Visit&& visit) const;

    NamedTensors parameters_;
    std::vector<Buffer> buffers_;
    std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
    bool training_ = true;
    bool packed_ = false;
    Precision precision_ = Precision::float32;
};

// A list of submodules of one type, registered under their index ("0", "1", ...), as
// nn.ModuleList.
template <typename M>
class ModuleList : public Module {
public:
    void push_back(std::shared_ptr<M> module) {
        items_.push_back(register_module(std::to_string(items_.size()), std::move(module)));
    }
    size_t size() const { return items_.size(); }
    const std::shared_ptr<M>& operator[](size_t i) const { return items_.at(i); }
    auto begin() const { return items_.begin(); }
    auto end() const { return items_.end(); }

private:
    std::vector<std::shared_ptr<M>> items_;
};

}  // namespace seqgrad::nn
