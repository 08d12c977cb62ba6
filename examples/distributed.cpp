// Your own model trained data-parallel: the same program runs as one process or as several,
// started by `mpirun -np N distributed`. Every rank builds the model, rank 0's weights are
// broadcast so all start alike, and each step every rank computes the gradients of its own share
// of the batch; all_reduce_gradients() sums them (each weighted by its share of the rows, so that
// the sum is the gradient of the whole batch's mean loss) and every rank takes the same Adam step.
// A small network learns to add two digits (as examples/layers.cpp does in one process).
// Build it against an installed seqgrad (CMakeLists.txt beside it); with MPI when seqgrad has it.
#include <seqgrad/seqgrad.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace sg = seqgrad;

class SumModel : public sg::nn::Module {
public:
    explicit SumModel(sg::Generator& gen)
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

int main(int argc, char** argv) {
    sg::nn::Distributed group(&argc, &argv);  // MPI_Init under mpirun; one process otherwise
    sg::set_num_threads(1);

    // The batch: all 100 pairs of digits. This rank's share: rows [100 r / N, 100 (r + 1) / N).
    const int64_t rows = 100, begin = rows * group.rank() / group.size(),
                  end = rows * (group.rank() + 1) / group.size();
    std::vector<int64_t> pair_values, sum_values;
    for (int64_t row = begin; row < end; ++row) {
        pair_values.insert(pair_values.end(), {row / 10, row % 10});
        sum_values.push_back(row / 10 + row % 10);
    }
    const auto pairs = sg::IntTensor::from_vector(pair_values, {end - begin, 2});
    const auto sums = sg::IntTensor::from_vector(sum_values, {end - begin});
    const float share = static_cast<float>(end - begin) / static_cast<float>(rows);

    sg::Generator gen(1 + static_cast<uint64_t>(group.rank()));  // different on purpose: the broadcast aligns them
    SumModel model(gen);
    sg::nn::broadcast_parameters(model.parameters(), group);
    sg::nn::Adam adam(model.named_parameters(), {.lr = 0.01});
    for (int step = 1; step <= 300; ++step) {
        model.zero_grad();
        sg::Tensor loss = sg::cross_entropy(model.forward(pairs), sums);  // the mean over this rank's rows
        loss.backward();
        sg::nn::all_reduce_gradients(model.parameters(), group, share);
        adam.step();
        // The whole batch's loss: the shares' means, weighted likewise and summed.
        double total[1] = {share * loss.item()};
        group.all_reduce_sum(std::span<double>(total));
        if (step % 100 == 0 && group.is_root()) std::printf("step %d: loss %.4f\n", step, total[0]);
    }

    // Every rank holds the same weights: each counts its own rows, and the counts are summed.
    sg::NoGradGuard no_grad;
    const sg::IntTensor predicted = sg::argmax(model.forward(pairs), -1);
    float correct[1] = {0};
    for (int64_t i = 0; i < sums.numel(); ++i) correct[0] += predicted.data()[i] == sums.data()[i] ? 1.0f : 0.0f;
    group.all_reduce_sum(std::span<float>(correct));
    if (group.is_root())
        std::printf("trained on %d %s: adds %.0f of 100 pairs\n", group.size(),
                    group.size() == 1 ? "process" : "processes", correct[0]);
    return 0;
}
