// Your own model from seqgrad's layers: a module, Adam, saving the weights and loading them into
// a fresh copy. A small network learns to add two digits (embeddings, a GELU layer, a linear
// read-out over the 19 possible sums). Build it against an installed seqgrad (CMakeLists.txt
// beside it); it writes adder.safetensors in the working directory.
#include <seqgrad/seqgrad.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sg = seqgrad;

class Adder : public sg::nn::Module {
public:
    explicit Adder(sg::Generator& gen)
        : digits(register_module("digits", std::make_shared<sg::nn::Embedding>(10, 16, gen))),
          hidden(register_module("hidden", std::make_shared<sg::nn::Linear>(2 * 16, 64, gen))),
          out(register_module("out", std::make_shared<sg::nn::Linear>(64, 19, gen))) {}

    // [n, 2] digit pairs -> [n, 19] scores of their sums.
    sg::Tensor forward(const sg::IntTensor& pairs) const {
        const sg::Tensor both = sg::reshape(digits->forward(pairs), {pairs.size(0), 2 * 16});
        return out->forward(sg::gelu(hidden->forward(both)));
    }

    std::shared_ptr<sg::nn::Embedding> digits;
    std::shared_ptr<sg::nn::Linear> hidden, out;
};

// How many of the pairs the model adds correctly.
int correct_sums(const Adder& model, const sg::IntTensor& pairs, const sg::IntTensor& sums) {
    sg::NoGradGuard no_grad;
    const sg::IntTensor predicted = sg::argmax(model.forward(pairs), -1);
    int correct = 0;
    for (int64_t i = 0; i < sums.numel(); ++i) correct += predicted.data()[i] == sums.data()[i];
    return correct;
}

int main() {
    std::vector<int64_t> pair_values, sum_values;
    for (int64_t a = 0; a < 10; ++a)
        for (int64_t b = 0; b < 10; ++b) {
            pair_values.insert(pair_values.end(), {a, b});
            sum_values.push_back(a + b);
        }
    const auto pairs = sg::IntTensor::from_vector(pair_values, {100, 2});
    const auto sums = sg::IntTensor::from_vector(sum_values, {100});

    sg::Generator gen(1);
    Adder model(gen);
    std::printf("%lld parameters\n", static_cast<long long>(model.num_parameters()));
    sg::nn::Adam adam(model.named_parameters(), {.lr = 0.01});
    for (int step = 1; step <= 300; ++step) {
        model.zero_grad();
        sg::Tensor loss = sg::cross_entropy(model.forward(pairs), sums);
        loss.backward();
        adam.step();
        if (step % 100 == 0) std::printf("step %d: loss %.4f\n", step, loss.item());
    }
    std::printf("trained: adds %d of 100 pairs\n", correct_sums(model, pairs, sums));

    // The weights under their state_dict names ("digits.weight", "hidden.bias", ...), written
    // atomically, then read into a model that starts from other random weights.
    sg::SafetensorsFile file;
    for (const auto& [name, tensor] : model.state_dict()) file.put(name, tensor);
    file.save("adder.safetensors");

    sg::Generator other_gen(2);
    Adder restored(other_gen);
    const sg::SafetensorsFile loaded = sg::SafetensorsFile::load("adder.safetensors");
    std::map<std::string, sg::Tensor> state;
    for (const std::string& name : loaded.names()) state[name] = loaded.tensor(name);
    restored.load_state_dict(state);
    std::printf("restored: adds %d of 100 pairs\n", correct_sums(restored, pairs, sums));
    return 0;
}
