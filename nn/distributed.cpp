// Distributed (distributed.h): MPI's world communicator when seqgrad is built with MPI
// (SEQGRAD_HAVE_MPI), a group of one process otherwise; and the two operations on parameters.
#include "seqgrad/nn/distributed.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"

#ifdef SEQGRAD_HAVE_MPI
#include <mpi.h>
#endif

namespace seqgrad::nn {
namespace {

const Distributed* g_current = nullptr;

#ifdef SEQGRAD_HAVE_MPI
// An MPI call's status as an Error (the world communicator returns errors instead of aborting,
// see the constructor).
void check_mpi(int status, const char* what) {
    if (status == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(status, text, &length);
    throw Error(detail::concat("distributed: ", what, " failed: ", std::string(text, static_cast<size_t>(length))));
}

// MPI counts are ints: long spans go in pieces.
constexpr int64_t kMaxCount = int64_t{1} << 30;

template <class T>
void all_reduce_in_pieces(std::span<T> values, MPI_Datatype type) {
    for (size_t begin = 0; begin < values.size(); begin += kMaxCount) {
        const auto count = static_cast<int>(std::min<size_t>(kMaxCount, values.size() - begin));
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data() + begin, count, type, MPI_SUM, MPI_COMM_WORLD),
                  "MPI_Allreduce");
    }
}

template <class T>
void broadcast_in_pieces(std::span<T> values, MPI_Datatype type, int root) {
    for (size_t begin = 0; begin < values.size(); begin += kMaxCount) {
        const auto count = static_cast<int>(std::min<size_t>(kMaxCount, values.size() - begin));
        check_mpi(MPI_Bcast(values.data() + begin, count, type, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
}
#endif

}  // namespace

int launcher_size() {
    // Open MPI's mpirun, MPICH's and Intel MPI's hydra (PMI), and a Slurm job step (srun).
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
        const char* value = std::getenv(name);
        if (value == nullptr) continue;
        char* end = nullptr;
        const long n = std::strtol(value, &end, 10);
        if (end != value && *end == '\0' && n >= 1 && n < (1L << 30)) return static_cast<int>(n);
    }
    return 1;
}

bool Distributed::built_with_mpi() {
#ifdef SEQGRAD_HAVE_MPI
    return true;
#else
    return false;
#endif
}

Distributed::Distributed(Single) {}

Distributed::Distributed(int* argc, char*** argv) {
    check(g_current == nullptr, "Distributed", "a Distributed is already alive in this process; create one, in main");
#ifdef SEQGRAD_HAVE_MPI
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized && launcher_size() == 1) {
        // Not started by a launcher: one process, without MPI at all (a singleton MPI_Init would
        // start a helper daemon and shared-memory files for nothing).
        g_current = this;
        return;
    }
    if (!initialized) {
        int provided = 0;
        // Only the main thread calls MPI; seqgrad's pool threads never do.
        check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
        owns_mpi_ = true;
    }
    // Errors come back as statuses (and so as Errors), not as MPI's default abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm local;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type");
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
#else
    (void)argc;
    (void)argv;
    const int launched = launcher_size();
    check(launched == 1, "distributed",
          detail::concat("this seqgrad was built without MPI, so it cannot join the ", launched,
                         " processes the launcher started: install libopenmpi-dev and rebuild (CMake finds MPI by "
                         "itself), or run one process"));
#endif
    g_current = this;
}

Distributed::~Distributed() {
    if (g_current == this) g_current = nullptr;
#ifdef SEQGRAD_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_mpi_ && !finalized) MPI_Finalize();
#endif
}

const Distributed& Distributed::current() {
    static const Distributed single{Single{}};
    return g_current != nullptr ? *g_current : single;
}

void Distributed::all_reduce_sum([[maybe_unused]] std::span<float> values) const {
    if (size_ == 1) return;
#ifdef SEQGRAD_HAVE_MPI
    all_reduce_in_pieces(values, MPI_FLOAT);
#endif
}

void Distributed::all_reduce_sum([[maybe_unused]] std::span<double> values) const {
    if (size_ == 1) return;
#ifdef SEQGRAD_HAVE_MPI
    all_reduce_in_pieces(values, MPI_DOUBLE);
#endif
}

void Distributed::broadcast([[maybe_unused]] std::span<float> values, int root) const {
    check(root >= 0 && root < size_, "Distributed::broadcast", "root ", root, " is not a rank of ", size_);
    if (size_ == 1) return;
#ifdef SEQGRAD_HAVE_MPI
    broadcast_in_pieces(values, MPI_FLOAT, root);
#endif
}

void Distributed::broadcast([[maybe_unused]] std::span<double> values, int root) const {
    check(root >= 0 && root < size_, "Distributed::broadcast", "root ", root, " is not a rank of ", size_);
    if (size_ == 1) return;
#ifdef SEQGRAD_HAVE_MPI
    broadcast_in_pieces(values, MPI_DOUBLE, root);
#endif
}

uint64_t Distributed::any_bits(uint64_t bits) const {
    if (size_ == 1) return bits;
#ifdef SEQGRAD_HAVE_MPI
    uint64_t all = 0;
    check_mpi(MPI_Allreduce(&bits, &all, 1, MPI_UINT64_T, MPI_BOR, MPI_COMM_WORLD), "MPI_Allreduce");
    return all;
#else
    return bits;
#endif
}

bool Distributed::all_equal([[maybe_unused]] uint64_t value) const {
    if (size_ == 1) return true;
#ifdef SEQGRAD_HAVE_MPI
    uint64_t low_high[2] = {value, ~value};  // the maximum of v and of ~v: equal everywhere iff v is
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, low_high, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return low_high[0] == value && low_high[1] == ~value;
#else
    return true;
#endif
}

void Distributed::abort(int status) const {
    std::fflush(stdout);
    std::fflush(stderr);
#ifdef SEQGRAD_HAVE_MPI
    if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, status);
#endif
    std::exit(status);
}

void all_reduce_gradients(const std::vector<Tensor>& params, const Distributed& group, float scale,
                          int64_t bucket_floats) {
    check(bucket_floats >= 1, "all_reduce_gradients", "bucket_floats must be at least 1, got ", bucket_floats);
    NoGradGuard no_grad;
    const int64_t n = static_cast<int64_t>(params.size());
    // The values reduced, laid end to end: one flag per parameter (1 where it has a gradient),
    // then every parameter's gradient (zeros where it has none). Buckets are cut from this.
    std::vector<int64_t> offsets(params.size() + 1, n);
    for (size_t i = 0; i < params.size(); ++i) offsets[i + 1] = offsets[i] + params[i].numel();
    const int64_t total = offsets.back();
    std::vector<Tensor> sums;  // new gradient tensors: two parameters may share one gradient's storage
    sums.reserve(params.size());
    for (const Tensor& p : params) sums.push_back(Tensor::zeros(p.shape()));
    std::vector<float> flags(params.size());
    std::vector<float> bucket(static_cast<size_t>(std::min(total, bucket_floats)));

    for (int64_t begin = 0; begin < total; begin += bucket_floats) {
        const int64_t end = std::min(total, begin + bucket_floats);
        // Pack [begin, end): flags, then the slices of the gradients it covers.
        for (int64_t at = begin; at < end;) {
            if (at < n) {
                const Tensor g = params[static_cast<size_t>(at)].grad();
                bucket[static_cast<size_t>(at - begin)] = g.defined() ? 1.0f : 0.0f;
                ++at;
                continue;
            }
            const auto i =
                static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), at) - offsets.begin() - 1);
            const int64_t stop = std::min(end, offsets[i + 1]);
            float* out = bucket.data() + (at - begin);
            const Tensor g = params[i].grad();
            if (g.defined()) {
                const float* in = g.data() + (at - offsets[i]);
                for (int64_t k = 0; k < stop - at; ++k) out[k] = in[k] * scale;
            } else {
                std::fill(out, out + (stop - at), 0.0f);
            }
            at = stop;
        }
        group.all_reduce_sum(std::span<float>(bucket.data(), static_cast<size_t>(end - begin)));
        // Unpack into the flags and the new gradients.
        for (int64_t at = begin; at < end;) {
            if (at < n) {
                flags[static_cast<size_t>(at)] = bucket[static_cast<size_t>(at - begin)];
                ++at;
                continue;
            }
            const auto i =
                static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), at) - offsets.begin() - 1);
            const int64_t stop = std::min(end, offsets[i + 1]);
            std::memcpy(sums[i].data() + (at - offsets[i]), bucket.data() + (at - begin),
                        static_cast<size_t>(stop - at) * sizeof(float));
            at = stop;
        }
    }
    for (size_t i = 0; i < params.size(); ++i) {
        Tensor p = params[i];
        if (flags[i] > 0) p.set_grad(sums[i]);
        else p.zero_grad();
    }
}

void broadcast_parameters(const std::vector<Tensor>& params, const Distributed& group, int root) {
    if (group.size() == 1) return;
    for (Tensor p : params) group.broadcast(std::span<float>(p.data(), static_cast<size_t>(p.numel())), root);
}

}  // namespace seqgrad::nn
