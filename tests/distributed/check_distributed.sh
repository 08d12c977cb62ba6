#!/usr/bin/env bash
# Data-parallel training is the one-process update: trains MODEL for 50 steps as one process and
# twice as 2 ranks (mpirun, one thread each) on the same global batches, then checks
#   - 2 ranks against one process: losses and final weights equal within float32 summation-order
#     differences (see TOLERANCE below);
#   - the two 2-rank runs, and a third that sums the gradients after the backward pass instead of
#     during it: bit-identical losses and weights;
#   - 2 ranks against one process again with plain SGD and no clipping, whose steps follow the
#     gradients' scale (Adam's and clipping's do not): a wrong weighting of the ranks' shares shows;
#     and so with each rank's share accumulated over 3 micro-batches (--accumulate under MPI);
#   - each run had the ranks it was launched with (1, or 2 under mpirun).
#   check_distributed.sh MPIRUN CHECK_DISTRIBUTED MODEL WORK_DIR
set -uo pipefail
mpirun=$1
check=$2
model=$3
work=$4
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
steps=50
# The ranks sum their token-weighted gradients in another order than one process sums its rows,
# and each rank's loss is a mean over its own tokens then weighted: the results differ in the last
# bits of float32 (a relative 1e-7 per operation). Adam divides by the root of the second moment,
# which amplifies such differences in weights whose gradients are near zero, and 50 steps compound
# them; a relative 1e-4 is far below any real difference (a wrong share or scale moves the loss
# at the first step by percents) and well above the rounding seen (reported on each run: losses
# 1e-7, weights up to 6e-6). The attention keys' biases are the exception the comparison states:
# their exact gradient is zero, so their values are rounding noise in every run.
TOLERANCE=1e-4
# Plain SGD does not amplify rounding (measured: losses 8e-8, weights up to 5e-7), and follows the
# gradients' scale, so a tighter bound catches a share weighted 1% off.
SGD_TOLERANCE=1e-5

fresh_dir "$work"
# One thread per process; Open MPI as root needs --allow-run-as-root; --oversubscribe in case the
# machine has fewer cores than ranks.
export OMP_NUM_THREADS=1
launch=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np 2)

"$check" train "$model" "$work/one" $steps > "$work/one.log" 2>&1 \
  || fail "one process failed: $(cat "$work/one.log")"
for run in a b; do
  "${launch[@]}" "$check" train "$model" "$work/two_$run" $steps > "$work/two_$run.log" 2>&1 \
    || fail "2 ranks (run $run) failed: $(cat "$work/two_$run.log")"
done
for run in one two_a two_b; do
  expected=2
  [ $run = one ] && expected=1
  [ "$(cat "$work/$run/ranks.txt" 2> /dev/null)" = $expected ] \
    || fail "run $run had $(cat "$work/$run/ranks.txt" 2> /dev/null) ranks, not $expected"
done
"$check" compare "$work/one" "$work/two_a" $TOLERANCE || fail "2 ranks differ from one process beyond $TOLERANCE"
"$check" compare "$work/two_a" "$work/two_b" 0 || fail "two 2-rank runs are not bit-identical"
# The gradients summed after the backward pass instead of during it: the same sums, bit for bit.
"${launch[@]}" "$check" train "$model" "$work/two_blocking" $steps blocking > "$work/two_blocking.log" 2>&1 \
  || fail "2 ranks (blocking) failed: $(cat "$work/two_blocking.log")"
"$check" compare "$work/two_a" "$work/two_blocking" 0 || fail "overlapped and blocking sums differ"
# Plain SGD without clipping: one process and 2 ranks.
"$check" train "$model" "$work/one_sgd" $steps sgd > "$work/one_sgd.log" 2>&1 \
  || fail "one process (sgd) failed: $(cat "$work/one_sgd.log")"
"${launch[@]}" "$check" train "$model" "$work/two_sgd" $steps sgd > "$work/two_sgd.log" 2>&1 \
  || fail "2 ranks (sgd) failed: $(cat "$work/two_sgd.log")"
[ "$(cat "$work/two_sgd/ranks.txt")" = 2 ] || fail "the 2-rank sgd run had $(cat "$work/two_sgd/ranks.txt") ranks"
"$check" compare "$work/one_sgd" "$work/two_sgd" $SGD_TOLERANCE \
  || fail "with sgd, 2 ranks differ from one process beyond $SGD_TOLERANCE"
# And each rank's share accumulated over 3 micro-batches: still the one-process update.
"${launch[@]}" "$check" train "$model" "$work/two_sgd_accumulate" $steps sgd_accumulate \
  > "$work/two_sgd_accumulate.log" 2>&1 \
  || fail "2 ranks (sgd, accumulating) failed: $(cat "$work/two_sgd_accumulate.log")"
"$check" compare "$work/one_sgd" "$work/two_sgd_accumulate" $SGD_TOLERANCE \
  || fail "with sgd and 3 micro-batches a rank, 2 ranks differ from one process beyond $SGD_TOLERANCE"
echo "$model: 2 ranks equal one process, and repeat bit for bit"
