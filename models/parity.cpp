// check_fixture: seqgrad against the tensors PyTorch stored in a fixture file.
#include "seqgrad/models/parity.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/ops.h"
#include "seqgrad/core/safetensors.h"
#include "seqgrad/models/model.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/attention.h"
#include "seqgrad/nn/lstm.h"
#include "seqgrad/nn/optim.h"
#include "seqgrad/internal/option_table.h"

namespace seqgrad::models {
namespace {

using internal::Json;

// Compares actual with expected elementwise; a shape mismatch is a failed check, not an error.
TensorCheck compare(const std::string& name, const Tensor& actual, const Tensor& expected, const Tolerance& tol) {
    TensorCheck c;
    c.name = name;
    if (!actual.defined() || actual.shape() != expected.shape()) {
        c.ok = false;
        std::ostringstream why;
        why << "shape " << (actual.defined() ? actual.shape() : Shape{}) << ", expected " << expected.shape();
        c.problem = why.str();
        return c;
    }
    const float* a = actual.data();
    const float* b = expected.data();
    double diff_squares = 0, squares = 0;
    for (int64_t i = 0; i < actual.numel(); ++i) {
        const double err = std::fabs(static_cast<double>(a[i]) - b[i]);
        const double mag = std::fabs(static_cast<double>(b[i]));
        if (!(err <= tol.atol + tol.rtol * mag)) c.ok = false;  // also catches NaN
        c.max_abs_error = std::max(c.max_abs_error, std::isnan(err) ? INFINITY : err);
        if (mag >= tol.atol) c.max_rel_error = std::max(c.max_rel_error, err / mag);
        diff_squares += err * err;
        squares += mag * mag;
    }
    c.rel_l2_error = squares > 0 ? std::sqrt(diff_squares / squares) : diff_squares > 0 ? INFINITY : 0;
    if (std::isnan(c.rel_l2_error)) c.rel_l2_error = INFINITY;
    // As a whole: within rel_l2 of the expected norm, or an error whose root mean square is at most
    // atol (a gradient that is zero in exact arithmetic, such as a key bias's, is float noise in
    // both programs, and its relative error means nothing).
    if (tol.rel_l2 > 0)
        c.ok = std::sqrt(diff_squares) <=
               tol.rel_l2 * std::sqrt(squares) + tol.atol * std::sqrt(static_cast<double>(actual.numel()));
    return c;
}

TensorCheck missing(const std::string& name, const std::string& problem) {
    TensorCheck c;
    c.name = name;
    c.ok = false;
    c.problem = problem;
    return c;
}

// A gradient that backward never reached is zero.
Tensor grad_or_zeros(const Tensor& t) { return t.grad().defined() ? t.grad() : Tensor::zeros(t.shape()); }

bool is_parameter_name(const std::string& name) {
    return name.rfind("input.", 0) != 0 && name.rfind("expect.", 0) != 0;
}

// Loads the fixture's parameters into `module`, reporting the file on a mismatch.
void load_parameters(nn::Module& module, const SafetensorsFile& file) {
    std::map<std::string, Tensor> state;
    for (const std::string& name : file.names())
        if (is_parameter_name(name)) state.emplace(name, file.tensor(name));
    try {
        module.load_state_dict(state);
    } catch (const Error& e) {
        throw Error(file.name() + ": the fixture's parameters do not fit the model: " + e.what());
    }
}

// expect.grad.<name> for every parameter, and no gradient for anything else.
void compare_gradients(const nn::Module& module, const SafetensorsFile& file, const Tolerance& tol,
                       FixtureResult& result) {
    std::map<std::string, bool> seen;
    for (const auto& [name, param] : module.state_dict()) {
        const std::string key = "expect.grad." + name;
        seen[key] = true;
        if (!file.contains(key))
            result.checks.push_back(missing(key, "the fixture has no gradient for this parameter"));
        else result.checks.push_back(compare(key, grad_or_zeros(param), file.tensor(key), tol));
    }
    for (const std::string& name : file.names())
        if (name.rfind("expect.grad.", 0) == 0 && !seen.count(name))
            result.checks.push_back(missing(name, "not a parameter of the model"));
}

Json metadata_json(const SafetensorsFile& file, const std::string& key) {
    return internal::parse_json(file.metadata(key), file.name() + ": metadata \"" + key + "\"");
}

float label_smoothing_of(const SafetensorsFile& file) {
    const Json loss = metadata_json(file, "loss");
    check(loss.is_object() && loss.contains("label_smoothing") && loss.at("label_smoothing").is_number(), "check",
          file.name(), ": metadata \"loss\" must be {\"label_smoothing\": number}");
    return loss.at("label_smoothing").get<float>();
}

// tgt_in = tgt[:, :-1], tgt_out = tgt[:, 1:] after checking the batch's shapes.
std::pair<IntTensor, IntTensor> split_target(const SafetensorsFile& file, const IntTensor& src, const IntTensor& tgt) {
    check(src.dim() == 2 && tgt.dim() == 2, "check", file.name(), ": input.src ", src.shape(), " and input.tgt ",
          tgt.shape(), " must both be [batch, length]");
    check(src.size(0) == tgt.size(0), "check", file.name(), ": input.src ", src.shape(), " and input.tgt ", tgt.shape(),
          " have different batch sizes");
    check(tgt.size(1) >= 2, "check", file.name(), ": input.tgt ", tgt.shape(),
          " needs at least <s> and one more token");
    return {tgt.slice_last(0, tgt.size(1) - 1), tgt.slice_last(1, tgt.size(1))};
}

// N steps of Adam from the fixture's weights; the loss before each step (loss_of the model) against
// expect.losses.
void check_adam(const ModelConfig& config, const SafetensorsFile& file, const std::function<Tensor(Model&)>& loss_of,
                const Tolerance& tol, FixtureResult& result) {
    const Json adam = metadata_json(file, "adam");
    auto number = [&](const char* key) {
        check(adam.contains(key) && adam.at(key).is_number(), "check", file.name(), ": metadata \"adam\" lacks \"", key,
              "\"");
        return adam.at(key).get<double>();
    };
    nn::AdamOptions options;
    options.lr = number("lr");
    options.beta1 = number("beta1");
    options.beta2 = number("beta2");
    options.eps = number("eps");
    options.weight_decay = adam.contains("weight_decay") ? number("weight_decay") : 0.0;
    const auto flag = [&](const char* key) {
        check(!adam.contains(key) || adam.at(key).is_boolean(), "check", file.name(), ": metadata \"adam\" \"", key,
              "\" must be true or false");
        return adam.contains(key) && adam.at(key).get<bool>();
    };
    // AdamW (decoupled weight decay), and on the parameters of rank >= 2 only: a GPT's groups.
    const bool decoupled = flag("decoupled_weight_decay");
    options.decay_matrices_only = flag("weight_decay_rank2_only");
    const Tensor expected = file.tensor("expect.losses");
    check(expected.dim() == 1, "check", file.name(), ": expect.losses must be one-dimensional, got ", expected.shape());

    Generator gen(0);
    auto model = make_model(config, gen);
    load_parameters(*model, file);
    model->eval();
    std::unique_ptr<nn::Adam> adam_or_adamw = decoupled
                                                  ? std::make_unique<nn::AdamW>(model->named_parameters(), options)
                                                  : std::make_unique<nn::Adam>(model->named_parameters(), options);
    nn::Adam& optimizer = *adam_or_adamw;
    Tensor losses = Tensor::empty(expected.shape());
    for (int64_t step = 0; step < expected.numel(); ++step) {
        optimizer.zero_grad();
        Tensor loss = loss_of(*model);
        losses.data()[step] = loss.item();
        loss.backward();
        optimizer.step();
    }
    result.checks.push_back(compare("adam.losses", losses, expected, tol));
}

// An encoder's fixture (docs/parity.md, "bert"): both heads' logits, the sum of their losses, its
// gradients and AdamW's steps on it.
void check_encoder(EncoderModel& model, const SafetensorsFile& file, const ModelConfig& config, const Tolerance& tol,
                   FixtureResult& result) {
    const IntTensor tokens = file.int_tensor("input.tokens");
    const IntTensor segments = file.contains("input.segments") ? file.int_tensor("input.segments") : IntTensor{};
    const IntTensor mlm_labels = file.int_tensor("input.mlm_labels");
    const IntTensor class_labels = file.int_tensor("input.class_labels");
    check(mlm_labels.shape() == tokens.shape(), "check", file.name(), ": input.mlm_labels ", mlm_labels.shape(),
          " is not as input.tokens, ", tokens.shape());
    const auto loss_of = [&](Model& m) {
        auto& encoder = dynamic_cast<EncoderModel&>(m);
        const Tensor hidden = encoder.forward(tokens, segments);
        return add(encoder.mlm_loss(hidden, mlm_labels), encoder.class_loss(hidden, class_labels));
    };
    const Tensor hidden = model.forward(tokens, segments);
    const Tensor mlm = model.mlm_logits(hidden), classes = model.class_logits(hidden);
    Tensor loss = loss_of(model);
    loss.backward();
    result.checks.push_back(compare("expect.mlm_logits", mlm, file.tensor("expect.mlm_logits"), tol));
    result.checks.push_back(compare("expect.class_logits", classes, file.tensor("expect.class_logits"), tol));
    result.checks.push_back(compare("expect.loss", loss, file.tensor("expect.loss"), tol));
    compare_gradients(model, file, tol, result);
    if (file.metadata().count("adam")) check_adam(config, file, loss_of, tol, result);
}

void check_model(const SafetensorsFile& file, const ModelConfig& config, const Tolerance& tol, FixtureResult& result) {
    Generator gen(0);
    auto model = make_model(config, gen);
    load_parameters(*model, file);
    model->eval();  // fixtures are made without dropout
    if (auto* encoder = dynamic_cast<EncoderModel*>(model.get()))
        return check_encoder(*encoder, file, config, tol, result);
    const IntTensor tgt = file.int_tensor("input.tgt");
    // A language model reads no source: [batch, 0] unless the file holds one.
    const std::vector<std::string>& names = file.names();
    const bool has_src = std::find(names.begin(), names.end(), "input.src") != names.end();
    const IntTensor src = reads_source(config) || has_src ? file.int_tensor("input.src")
                                                          : IntTensor::zeros({tgt.size(0), 0});
    const auto [tgt_in, tgt_out] = split_target(file, src, tgt);
    Tensor logits = model->logits(src, tgt_in);
    Tensor loss = sequence_loss(logits, tgt_out, label_smoothing_of(file));
    loss.backward();
    result.checks.push_back(compare("expect.logits", logits, file.tensor("expect.logits"), tol));
    result.checks.push_back(compare("expect.loss", loss, file.tensor("expect.loss"), tol));
    compare_gradients(*model, file, tol, result);
    if (file.metadata().count("adam")) {
        const float smoothing = label_smoothing_of(file);
        const IntTensor inputs = tgt_in, labels = tgt_out;  // a lambda captures no structured binding
        check_adam(
            config, file, [&](Model& m) { return sequence_loss(m.logits(src, inputs), labels, smoothing); }, tol,
            result);
    }
}

int64_t config_int(const Json& config, const SafetensorsFile& file, const char* key) {
    check(config.contains(key) && config.at(key).is_number_integer() && config.at(key).get<int64_t>() > 0, "check",
          file.name(), ": config needs a positive integer \"", key, "\"");
    return config.at(key).get<int64_t>();
}

Tensor input_requiring_grad(const SafetensorsFile& file, const std::string& name) {
    return file.tensor(name).set_requires_grad(true);
}

void check_lstm(const SafetensorsFile& file, const Json& config, const Tolerance& tol, FixtureResult& result) {
    check(config.contains("bidirectional") && config.at("bidirectional").is_boolean(), "check", file.name(),
          ": config needs \"bidirectional\": true or false");
    Generator gen(0);
    nn::LSTM lstm(config_int(config, file, "input_size"), config_int(config, file, "hidden_size"),
                  config_int(config, file, "num_layers"), config.at("bidirectional").get<bool>(), gen);
    load_parameters(lstm, file);
    Tensor x = input_requiring_grad(file, "input.x");
    const IntTensor lengths = file.int_tensor("input.lengths");
    check(x.dim() == 3 && lengths.shape() == Shape{x.size(0)}, "check", file.name(), ": input.x ", x.shape(),
          " and input.lengths ", lengths.shape(), " do not fit together");
    const nn::LSTMOutput out = lstm.forward(x, lengths.to_vector());
    Tensor loss = sum(out.output * file.tensor("input.out_weight"));
    loss.backward();
    result.checks.push_back(compare("expect.output", out.output, file.tensor("expect.output"), tol));
    result.checks.push_back(compare("expect.h_n", out.h_n, file.tensor("expect.h_n"), tol));
    result.checks.push_back(compare("expect.c_n", out.c_n, file.tensor("expect.c_n"), tol));
    result.checks.push_back(compare("expect.loss", loss, file.tensor("expect.loss"), tol));
    compare_gradients(lstm, file, tol, result);
    result.checks.push_back(compare("expect.input_grad.x", grad_or_zeros(x), file.tensor("expect.input_grad.x"), tol));
}

void check_attention(const SafetensorsFile& file, const Json& config, const Tolerance& tol, FixtureResult& result) {
    Generator gen(0);
    const int64_t d_model = config_int(config, file, "d_model"), n_heads = config_int(config, file, "n_heads");
    nn::MultiHeadAttention attention(d_model, n_heads, gen);  // checks d_model against n_heads
    load_parameters(attention, file);
    Tensor q = input_requiring_grad(file, "input.q");
    Tensor k = input_requiring_grad(file, "input.k");
    Tensor v = input_requiring_grad(file, "input.v");
    const nn::AttentionOutput out = attention.forward(q, k, v, file.int_tensor("input.mask"));
    Tensor loss = sum(out.output * file.tensor("input.out_weight"));
    loss.backward();
    result.checks.push_back(compare("expect.output", out.output, file.tensor("expect.output"), tol));
    result.checks.push_back(compare("expect.attention_weights", out.attention_weights,
                                    file.tensor("expect.attention_weights"), tol));
    result.checks.push_back(compare("expect.loss", loss, file.tensor("expect.loss"), tol));
    compare_gradients(attention, file, tol, result);
    for (const char* name : {"q", "k", "v"}) {
        const Tensor& input = *name == 'q' ? q : *name == 'k' ? k : v;
        const std::string key = std::string("expect.input_grad.") + name;
        result.checks.push_back(compare(key, grad_or_zeros(input), file.tensor(key), tol));
    }
}

}  // namespace

bool FixtureResult::ok() const {
    for (const TensorCheck& c : checks)
        if (!c.ok) return false;
    return !checks.empty();
}

FixtureResult check_fixture(const std::string& path, const Tolerance& tolerance, Precision precision) {
    const MatmulPrecisionScope products(precision);
    const SafetensorsFile file = SafetensorsFile::load(path);
    FixtureResult result;
    result.path = path;
    const Json config = metadata_json(file, "config");
    check(config.is_object() && config.contains("model") && config.at("model").is_string(), "check", file.name(),
          ": metadata \"config\" must be a JSON object with a \"model\"");
    result.kind = config.at("model").get<std::string>();
    try {
        if (result.kind == "lstm") {
            check_lstm(file, config, tolerance, result);
        } else if (result.kind == "multi_head_attention") {
            check_attention(file, config, tolerance, result);
        } else {
            std::vector<std::string> ignored;
            const ModelConfig model_config =
                ModelConfig::from_json(file.metadata("config"), /*strict=*/false, &ignored);
            for (const std::string& key : ignored) result.notes.push_back("config key \"" + key + "\" ignored");
            check_model(file, model_config, tolerance, result);
        }
    } catch (const Error& e) {
        const std::string what = e.what();
        if (what.find(file.name()) != std::string::npos) throw;
        throw Error(file.name() + ": " + what);
    }
    return result;
}

}  // namespace seqgrad::models
