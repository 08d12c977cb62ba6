// The one place seqgrad calls sgemm.
#include "blas.h"

#include <algorithm>
#include <climits>

#include "seqgrad/core/error.h"

namespace seqgrad::detail {

void check_blas_size(int64_t n, const char* op) {
    check(n <= INT_MAX, op, "a matrix extent of ", n, " exceeds what BLAS can index");
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c,
          bool accumulate) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // an empty sum: BLAS implementations differ on whether they touch C
        if (!accumulate) std::fill_n(c, m * n, 0.0f);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a,
                static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), accumulate ? 1.0f : 0.0f, c,
                static_cast<int>(n));
}

}  // namespace seqgrad::detail
