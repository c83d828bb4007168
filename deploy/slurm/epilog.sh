#!/usr/bin/env bash
# gpuwatch Slurm Epilog: remove the GPU map files that this job's prolog wrote.
#
# Removes ${GPUWATCH_RUN_DIR:-/run/gpuwatch}/gpu/<index|UUID> only when the file's job_id is
# this job's: a GPU already handed to the next job (its prolog may run first when jobs end
# and start close together) keeps that job's file. Also removes this job's leftover temporaries.
# Like the prolog it never fails (a failing epilog drains the node) and uses no network.
set -Eeuo pipefail  # -E: the ERR trap below also covers functions

gpuwatch_epilog() {
  local dir=${GPUWATCH_RUN_DIR:-/run/gpuwatch}/gpu
  local job=${SLURM_JOB_ID:-}
  [[ $job =~ ^[0-9]+$ ]] || return 0
  [[ -d $dir ]] || return 0
  local f line owner
  for f in "$dir"/*; do
    [[ -f $f ]] || continue
    owner=""
    while IFS= read -r line; do
      if [[ $line == job_id=* ]]; then owner=${line#job_id=}; break; fi
    done <"$f" || true
    [[ $owner == "$job" ]] && rm -f -- "$f"
  done
  for f in "$dir"/.*."$job".*; do   # temporaries of a prolog that died mid-write
    [[ -f $f ]] && rm -f -- "$f"
  done
  return 0
}

# any failing command under set -e lands here: report it, but exit 0 (see above)
trap 'echo "gpuwatch epilog: could not clean GPU map for job ${SLURM_JOB_ID:-?} (line $LINENO)" >&2; exit 0' ERR
gpuwatch_epilog
exit 0
