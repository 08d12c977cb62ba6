// Distributed (distributed.h): MPI's world communicator when seqgrad is built with MPI
// (SEQGRAD_HAVE_MPI), a group of one process otherwise; and the two operations on parameters.
#include "seqgrad/nn/distributed.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/core/ops.h"

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

// A bucket: some parameters (consecutive in reverse order), sent as one array: a flag per
// parameter (1 where it has a gradient), then their gradients end to end.
struct Bucket {
    std::vector<size_t> params;
    std::vector<float> values;
    int64_t ready = 0;  // parameters whose gradient is final
};

struct GradientReducer::State {
    std::vector<Tensor> params;
    const Distributed* group;
    std::vector<Bucket> buckets;
    std::unordered_map<const TensorImpl*, size_t> index;  // parameter -> its place in params
    std::vector<size_t> bucket_of;
    std::vector<char> ready;
    size_t next_to_start = 0;  // buckets start in order, on every rank alike
    float scale = 1;
#ifdef SEQGRAD_HAVE_MPI
    std::vector<MPI_Request> requests;
#endif

    void pack(Bucket& bucket) const {
        size_t at = bucket.params.size();
        for (size_t k = 0; k < bucket.params.size(); ++k) {
            const Tensor& p = params[bucket.params[k]];
            const Tensor g = p.grad();
            const auto n = static_cast<size_t>(p.numel());
            bucket.values[k] = g.defined() ? 1.0f : 0.0f;
            if (g.defined()) {
                const float* in = g.data();
                for (size_t i = 0; i < n; ++i) bucket.values[at + i] = in[i] * scale;
            } else {
                std::fill(bucket.values.begin() + static_cast<std::ptrdiff_t>(at),
                          bucket.values.begin() + static_cast<std::ptrdiff_t>(at + n), 0.0f);
            }
            at += n;
        }
    }

    // Starts every bucket, in order, whose gradients are all final; lets those under way progress.
    void start_ready_buckets() {
        while (next_to_start < buckets.size() &&
               buckets[next_to_start].ready == static_cast<int64_t>(buckets[next_to_start].params.size())) {
            Bucket& bucket = buckets[next_to_start++];
            pack(bucket);
#ifdef SEQGRAD_HAVE_MPI
            check(bucket.values.size() < (size_t{1} << 31), "GradientReducer", "a bucket of ", bucket.values.size(),
                  " values is too large for one MPI call");
            MPI_Request request;
            check_mpi(MPI_Iallreduce(MPI_IN_PLACE, bucket.values.data(), static_cast<int>(bucket.values.size()),
                                     MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
                      "MPI_Iallreduce");
            requests.push_back(request);
#endif
        }
#ifdef SEQGRAD_HAVE_MPI
        // Open MPI moves a non-blocking collective on only inside MPI calls.
        if (!requests.empty()) {
            int done = 0;
            check_mpi(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE),
                      "MPI_Testall");
        }
#endif
    }

    void mark_ready(size_t i) {
        if (ready[i]) return;
        ready[i] = 1;
        ++buckets[bucket_of[i]].ready;
    }
};

GradientReducer::GradientReducer(std::vector<Tensor> params, const Distributed& group, int64_t bucket_floats)
    : state_(std::make_unique<State>()) {
    check(bucket_floats >= 1, "GradientReducer", "bucket_floats must be at least 1, got ", bucket_floats);
    State& st = *state_;
    st.params = std::move(params);
    st.group = &group;
    st.bucket_of.resize(st.params.size());
    int64_t filled = 0;
    for (size_t k = st.params.size(); k-- > 0;) {
        const int64_t n = st.params[k].numel();
        if (st.buckets.empty() || (filled > 0 && filled + n > bucket_floats)) {
            st.buckets.emplace_back();
            filled = 0;
        }
        st.buckets.back().params.push_back(k);
        st.bucket_of[k] = st.buckets.size() - 1;
        filled += n;
        check(st.index.emplace(st.params[k].impl(), k).second, "GradientReducer", "parameter ", k,
              " appears twice in the list");
    }
    for (Bucket& bucket : st.buckets) {
        size_t values = bucket.params.size();
        for (size_t k : bucket.params) values += static_cast<size_t>(st.params[k].numel());
        bucket.values.resize(values);
    }
}

GradientReducer::~GradientReducer() = default;

int64_t GradientReducer::buckets() const { return static_cast<int64_t>(state_->buckets.size()); }

void GradientReducer::backward(const Tensor& loss, float scale) {
    State& st = *state_;
    last_wait_seconds_ = 0;
    if (st.group->size() == 1) {  // nothing to sum: the pass, and the scaling
        if (loss.defined()) loss.backward();
        if (scale != 1.0f) {
            NoGradGuard no_grad;
            for (Tensor p : st.params)
                if (p.grad().defined()) p.set_grad(mul(p.grad(), scale));
        }
        return;
    }
    st.scale = scale;
    st.next_to_start = 0;
    st.ready.assign(st.params.size(), 0);
    for (Bucket& bucket : st.buckets) bucket.ready = 0;
    if (loss.defined()) {
        backward_with_leaf_hook(loss, [&st](const Tensor& leaf) {
            const auto it = st.index.find(leaf.impl());
            if (it == st.index.end()) return;  // a leaf that is not one of the parameters
            st.mark_ready(it->second);
            st.start_ready_buckets();
        });
    }
    const auto wait_start = std::chrono::steady_clock::now();
    // Parameters the pass did not reach have no gradient here: zeros, and the rest starts.
    for (size_t i = 0; i < st.params.size(); ++i) st.mark_ready(i);
    st.start_ready_buckets();
#ifdef SEQGRAD_HAVE_MPI
    check_mpi(MPI_Waitall(static_cast<int>(st.requests.size()), st.requests.data(), MPI_STATUSES_IGNORE),
              "MPI_Waitall");
    st.requests.clear();
#endif
    NoGradGuard no_grad;
    for (const Bucket& bucket : st.buckets) {
        size_t at = bucket.params.size();
        for (size_t k = 0; k < bucket.params.size(); ++k) {
            Tensor p = st.params[bucket.params[k]];
            const auto n = static_cast<size_t>(p.numel());
            if (bucket.values[k] > 0) {
                // In place when the gradient is the parameter's alone (as the engine leaves it).
                Tensor g = p.grad();
                const bool own = g.defined() && g.impl_ptr().use_count() == 2 && g.impl()->storage.use_count() == 1;
                if (!own) {
                    g = Tensor::zeros(p.shape());
                    p.set_grad(g);
                }
                std::memcpy(g.data(), bucket.values.data() + at, n * sizeof(float));
            } else {
                p.zero_grad();
            }
            at += n;
        }
    }
    last_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
}

void all_reduce_gradients(const std::vector<Tensor>& params, const Distributed& group, float scale,
                          int64_t bucket_floats) {
    // The reducer's buckets, started once the gradients are all there: no pass to overlap with.
    GradientReducer(params, group, bucket_floats).backward(Tensor(), scale);
}

void broadcast_parameters(const std::vector<Tensor>& params, const Distributed& group, int root) {
    if (group.size() == 1) return;
    for (Tensor p : params) group.broadcast(std::span<float>(p.data(), static_cast<size_t>(p.numel())), root);
}

std::string mpi_library() {
#ifdef SEQGRAD_HAVE_MPI
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "(version unknown)";
    const std::string name(text, static_cast<size_t>(std::max(length, 0)));
    return name.substr(0, std::min(name.find_first_of(",\n"), name.size()));
#else
    return "none (built without MPI)";
#endif
}

std::vector<RuntimePart> runtime_parts() {
    std::vector<RuntimePart> parts = seqgrad::runtime_parts();
    parts.push_back({"MPI", mpi_library()});
    return parts;
}

std::string runtime_line() { return seqgrad::runtime_line(runtime_parts()); }

}  // namespace seqgrad::nn
