#!/usr/bin/env bash
# gpuwatch Slurm Prolog: record which job holds which GPU on this node.
#
# Writes ${GPUWATCH_RUN_DIR:-/run/gpuwatch}/gpu/<index> for every GRES index in
# SLURM_JOB_GPUS (and .../gpu/<UUID> when the UUID can be read without delay), each holding
#   job_id= uid= user= step= gpu_index= gpu_uuid= written_at=
# one key=value per line (read by gpuwatch.slurm.attribution). Files are written to a
# temporary name and renamed, so the agent never reads half a file.
#
# Why SLURM_JOB_GPUS and not CUDA_VISIBLE_DEVICES: it holds Slurm's GRES indices on every
# release, while CUDA_VISIBLE_DEVICES may hold UUIDs (Slurm 25.11+) or be renumbered by
# cgroup device constraints. The GRES index is the position in gres.conf's File= list
# (/dev/nvidia<minor>), which is not always the NVML index: the UUID file is the safe key.
#
# MIG: when CUDA_VISIBLE_DEVICES holds MIG device UUIDs (MIG-...; Slurm's NVML autodetect of
# MIG GRES), the job holds MIG instances, not cards: one file per MIG UUID is written
# (gpu_uuid=MIG-..., gpu_index empty) and no index file, since SLURM_JOB_GPUS then counts MIG
# devices, not cards. The agent reports each MIG instance under its own index and places the
# file by its UUID.
#
# Install: slurm.conf  Prolog=/etc/slurm/gpuwatch-prolog.sh  Epilog=/etc/slurm/gpuwatch-epilog.sh
# (PrologFlags=Alloc runs it at allocation time, so idle allocated GPUs are seen at once).
# Never fails the job: a non-zero prolog exit drains the node, and gpuwatch's bookkeeping is
# not worth that; errors go to stderr (slurmd's log) and the script exits 0.
# No network, no slurmctld calls; nvidia-smi is used only as a bounded fallback.
set -Eeuo pipefail  # -E: the ERR trap below also covers functions

gpuwatch_prolog() {
  local base=${GPUWATCH_RUN_DIR:-/run/gpuwatch}
  local dir=$base/gpu
  local job=${SLURM_JOB_ID:-} gpus=${SLURM_JOB_GPUS:-}
  [[ $job =~ ^[0-9]+$ ]] || return 0   # not a job context
  local uid=${SLURM_JOB_UID:-} user=${SLURM_JOB_USER:-} step=${SLURM_STEP_ID:-}
  local now; printf -v now '%(%s)T' -1
  local content

  # MIG instances, named by the MIG UUIDs in CUDA_VISIBLE_DEVICES
  local mig visible=${CUDA_VISIBLE_DEVICES:-}
  local -a migs=()
  IFS=',' read -r -a migs <<<"$visible"
  local wrote_mig=0
  for mig in "${migs[@]}"; do
    mig=${mig//[[:space:]]/}
    # MIG-<uuid> (driver R470+); the older MIG-GPU-<uuid>/<gi>/<ci> form is no file name: skipped
    [[ $mig =~ ^MIG-[A-Za-z0-9-]+$ ]] || continue
    if ((wrote_mig == 0)); then mkdir -p "$dir"; chmod 0755 "$base" "$dir" 2>/dev/null || true; fi
    printf -v content 'job_id=%s\nuid=%s\nuser=%s\nstep=%s\ngpu_index=\ngpu_uuid=%s\nwritten_at=%s\n' \
      "$job" "$uid" "$user" "$step" "$mig" "$now"
    put "$dir" "$mig" "$content" "$job"
    wrote_mig=1
  done
  ((wrote_mig == 0)) || return 0

  [[ -n $gpus ]] || return 0           # job without GPUs on this node

  mkdir -p "$dir"
  chmod 0755 "$base" "$dir" 2>/dev/null || true

  # minor number -> UUID, from the driver's /proc files (no process to start, no GPU wake-up)
  declare -A uuid_of=()
  local procdir=${GPUWATCH_NVIDIA_PROC:-/proc/driver/nvidia/gpus} info line minor uuid
  if [[ -d $procdir ]]; then
    for info in "$procdir"/*/information; do
      [[ -r $info ]] || continue
      minor="" uuid=""
      while IFS= read -r line; do
        case $line in
          "Device Minor:"*) minor=${line#*:}; minor=${minor//[[:space:]]/} ;;
          "GPU UUID:"*) uuid=${line#*:}; uuid=${uuid//[[:space:]]/} ;;
        esac
      done <"$info"
      [[ -n $minor && -n $uuid ]] && uuid_of[$minor]=$uuid
    done
  fi
  # fallback: nvidia-smi (NVML index, usually = minor), bounded so a hung driver cannot stall jobs
  if [[ ${#uuid_of[@]} -eq 0 && ${GPUWATCH_PROLOG_NVIDIA_SMI:-1} = 1 ]] && command -v nvidia-smi >/dev/null 2>&1; then
    local idx
    while IFS=', ' read -r idx uuid; do
      [[ $idx =~ ^[0-9]+$ && -n $uuid ]] && uuid_of[$idx]=$uuid
    done < <(timeout 3 nvidia-smi --query-gpu=index,uuid --format=csv,noheader 2>/dev/null || true)
  fi

  local item lo hi i
  local -a indices=() items=()
  IFS=',' read -r -a items <<<"$gpus"
  for item in "${items[@]}"; do        # "0,1" or ranges "0-3"
    if [[ $item =~ ^([0-9]+)-([0-9]+)$ ]]; then
      lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
      for ((i = lo; i <= hi; i++)); do indices+=("$i"); done
    elif [[ $item =~ ^[0-9]+$ ]]; then
      indices+=("$item")
    fi
  done
  for i in "${indices[@]}"; do
    uuid=${uuid_of[$i]:-}
    printf -v content 'job_id=%s\nuid=%s\nuser=%s\nstep=%s\ngpu_index=%s\ngpu_uuid=%s\nwritten_at=%s\n' \
      "$job" "$uid" "$user" "$step" "$i" "$uuid" "$now"
    put "$dir" "$i" "$content" "$job"
    [[ -n $uuid && $uuid =~ ^[A-Za-z0-9-]+$ ]] && put "$dir" "$uuid" "$content" "$job"
  done
  return 0
}

put() { # put <dir> <name> <content> <job>: write atomically (tmp + rename in the same dir)
  local tmp="$1/.$2.$4.$$"
  printf '%s' "$3" >"$tmp"
  chmod 0644 "$tmp"
  mv -f "$tmp" "$1/$2"
}

# any failing command under set -e lands here: report it, but exit 0 (see above)
trap 'echo "gpuwatch prolog: could not write GPU map for job ${SLURM_JOB_ID:-?} (line $LINENO)" >&2; exit 0' ERR
gpuwatch_prolog
exit 0
