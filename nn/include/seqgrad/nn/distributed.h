// Data-parallel training over MPI: the processes of one run, each a rank, train one model on their
// own shares of every batch. Each rank computes the gradients of its share; all_reduce_gradients()
// sums them over the ranks, so that every rank holds the gradients of the whole batch, takes the
// same optimizer step and keeps the same weights.
//
// A program starts the run by creating one Distributed (at the top of main, while it lives):
//
//     int main(int argc, char** argv) {
//         seqgrad::nn::Distributed group(&argc, &argv);   // MPI_Init, or a run of one process
//         Model model(...);                                // the same seed on every rank
//         seqgrad::nn::broadcast_parameters(model.parameters(), group);
//         for (...) {
//             ... forward and backward on this rank's share of the batch ...
//             seqgrad::nn::all_reduce_gradients(model.parameters(), group, 1.0f / group.size());
//             optimizer.step();
//         }
//     }
//
// and is launched with `mpirun -np N program`. MPI is optional: a seqgrad built without it (CMake
// did not find libopenmpi-dev) runs as one process, and refuses, with an Error, to be started as
// more than one. examples/distributed.cpp is a complete program.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "seqgrad/core/runtime.h"
#include "seqgrad/core/tensor.h"

namespace seqgrad::nn {

class Distributed {
public:
    // Joins the run the launcher started: MPI_Init when seqgrad was built with MPI and a launcher
    // started several processes (or the program initialised MPI itself), else a run of one
    // process that never touches MPI. An Error when the launcher started more than one process and seqgrad cannot
    // join them (built without MPI), or when another Distributed is alive.
    Distributed(int* argc, char*** argv);
    ~Distributed();  // MPI_Finalize
    Distributed(const Distributed&) = delete;
    Distributed& operator=(const Distributed&) = delete;

    // The Distributed alive, or a group of one process when there is none (library code asks
    // this, so that it runs unchanged with and without a launcher).
    static const Distributed& current();
    static bool built_with_mpi();

    int rank() const { return rank_; }
    int size() const { return size_; }
    bool is_root() const { return rank_ == 0; }
    int local_size() const { return local_size_; }  // ranks on this machine

    // Collectives: every rank calls each one, in the same order, with the same sizes.
    void all_reduce_sum(std::span<float> values) const;   // in place: the sums on every rank
    void all_reduce_sum(std::span<double> values) const;  // in place
    void broadcast(std::span<float> values, int root = 0) const;
    void broadcast(std::span<double> values, int root = 0) const;
    // Bitwise OR of `bits` over the ranks (for decisions every rank must take together).
    uint64_t any_bits(uint64_t bits) const;
    bool any(bool value) const { return any_bits(value ? 1 : 0) != 0; }
    // True on every rank when every rank passed the same value.
    bool all_equal(uint64_t value) const;
    // Ends every rank of the run at once (MPI_Abort) with `status`; exits when there is one.
    [[noreturn]] void abort(int status) const;

private:
    struct Single {};
    explicit Distributed(Single);

    int rank_ = 0;
    int size_ = 1;
    int local_size_ = 1;
    bool owns_mpi_ = false;
};

// The sum over the ranks of the gradients of `params`, each rank's multiplied by its `scale` first
// (1 / size() for the mean; a rank's share of the batch's tokens for a token-weighted mean), set as
// every rank's gradient. The gradients travel in buckets of at most `bucket_floats` values (one
// MPI_Iallreduce each), not one call per parameter. A parameter with no gradient on a rank counts
// as zeros there, and keeps no gradient only if it has none on every rank (an optimizer then skips
// it on every rank alike). One rank: only the scaling.
//
// Overlapped with the backward pass, as a data-parallel trainer wants it: backward() runs the
// loss's backward pass and, as soon as every gradient of a bucket is final (the last layers'
// first), starts summing that bucket over the ranks while the pass goes on through the earlier
// layers; then it waits for the last buckets and sets the sums as the gradients. The buckets are
// cut from the parameters in reverse order (the order in which the pass finishes them) and started
// in that fixed order on every rank, as MPI requires of collectives.
class GradientReducer {
public:
    GradientReducer(std::vector<Tensor> params, const Distributed& group, int64_t bucket_floats = int64_t{1} << 22);
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    // The backward pass of `loss`, each rank's gradients multiplied by its `scale`, summed over the
    // ranks. An undefined loss runs no pass: the gradients as they are take part (zeros after
    // zero_grad, when this rank had nothing to compute).
    void backward(const Tensor& loss, float scale);
    // Of the last backward(): seconds spent waiting for the sums after the pass ended (the
    // communication the pass did not hide), and the buckets.
    double last_wait_seconds() const { return last_wait_seconds_; }
    int64_t buckets() const;

private:
    struct State;
    std::unique_ptr<State> state_;
    double last_wait_seconds_ = 0;
};

// The same sum after the pass, of the gradients as they are: GradientReducer's buckets, started once
// all are ready (the result is the overlapped one's, bit for bit).
void all_reduce_gradients(const std::vector<Tensor>& params, const Distributed& group, float scale = 1.0f,
                          int64_t bucket_floats = int64_t{1} << 22);

// Copies the values of `params` on rank `root` to every other rank (at start-up, so that all
// ranks begin from the same weights whatever their initialisation did).
void broadcast_parameters(const std::vector<Tensor>& params, const Distributed& group, int root = 0);

// The number of processes the launcher says it started (mpirun's, PMI's or Slurm's environment),
// 1 when none did. What Distributed checks when seqgrad has no MPI.
int launcher_size();

// The MPI library this build runs with, as it names itself up to the first comma ("Open MPI
// v4.1.4"), or "none (built without MPI)".
std::string mpi_library();
// core's runtime_parts() (core/runtime.h) and the MPI library: what `seqgrad --version` prints and
// the line that heads seqgrad_bench's output and each training run's log.
std::vector<RuntimePart> runtime_parts();
std::string runtime_line();

}  // namespace seqgrad::nn
