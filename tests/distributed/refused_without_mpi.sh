#!/usr/bin/env bash
# A seqgrad built without MPI, started as one of several processes (the environment mpirun, PMI
# or srun gives each), says it cannot join them and exits with an error, before doing anything.
#   refused_without_mpi.sh SEQGRAD
set -uo pipefail
seqgrad=$1
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
for variable in OMPI_COMM_WORLD_SIZE PMI_SIZE SLURM_STEP_NUM_TASKS; do
  out=$(env "$variable=4" "$seqgrad" train --task reverse --model transformer --max-steps 1 --out /nonexistent/x 2>&1)
  refused "$variable=4" $? "$out" "built without MPI, so it cannot join the 4 processes"
done
out=$(OMPI_COMM_WORLD_SIZE=1 "$seqgrad" summary --model transformer 2>&1) || fail "one process was refused: $out"
echo "a launch of several processes is refused without MPI"
