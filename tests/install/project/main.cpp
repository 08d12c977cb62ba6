// The README's quick-start example, exactly as written there, built against the installed library.
#include <seqgrad/seqgrad.h>

#include <cstdio>

int main() {
    auto a = seqgrad::Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, /*requires_grad=*/true);
    auto b = seqgrad::Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2}, true);
    auto loss = seqgrad::tanh(seqgrad::matmul(a, b)).sum();  // also a + b, a * b, -a with broadcasting
    loss.backward();
    std::vector<float> ga = a.grad().to_vector();  // and loss.item(), a.shape()
    std::printf("loss %.6f\n", loss.item());
    std::printf("grad");
    for (float g : ga) std::printf(" %.6f", g);
    std::printf("\nshape [%lld, %lld]\n", static_cast<long long>(a.shape()[0]), static_cast<long long>(a.shape()[1]));
    return 0;
}
