#!/usr/bin/env bash
# Records real Slurm outputs into tests/fixtures/slurm/<version>/ for the parser tests.
# Needs the cluster from tests/slurm/start-slurm.sh (>= 7 CPUs advertised, 4 fake GPUs, slurmdbd).
# Jobs are submitted as the test user "alice" (made by start-slurm.sh, uid 2001) so that user/uid
# differ from root's in the recordings. Takes about 80 s.
#   running snapshot: squeue --json, scontrol show job -d -o, sinfo --json, a job's
#                     /proc/<pid>/cgroup and /proc/<pid>/environ
#   after the end:    sacct --json and sacct -P -n -X -o ... for the same jobs
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VER=$(sinfo --version | awk '{print $2}' | cut -d. -f1-2)
OUT=${1:-$HERE/../fixtures/slurm/$VER}
TUSER=${RECORD_USER:-alice}
mkdir -p "$OUT"
log() { echo "[record-fixtures] $*" >&2; }
# start-slurm.sh creates the user and its account association (SLURM_TEST_USER, default alice)
id "$TUSER" >/dev/null 2>&1 || { log "no user $TUSER: run SLURM_TEST_USER=$TUSER tests/slurm/start-slurm.sh"; exit 1; }
S0=$(date +%Y-%m-%dT%H:%M:%S)
sb() { runuser -u "$TUSER" -- sbatch --parsable -D /tmp -o /dev/null "$@"; }
# Then gpu:2 (cancelled later), gpu:1 (fails with exit 3), no GPU (completes), 2-task array without
# GPU, and a gpu:4 job that stays pending (Resources) while the others hold 3 of 4 GPUs.
# two jobs that end at once, so squeue --json (MinJobAge=300) shows finished jobs' exit codes
JE=$(sb -J exit3 -t 1 --wrap 'exit 3')
JK=$(sb -J killed -t 1 --wrap 'kill -9 $$')
JG2=$(sb -J train-gpu2 --gres=gpu:2 -c 2 --mem=1G -t 30 --wrap 'sleep 300')
JG1=$(sb -J eval-gpu1 --gres=gpu:fake:1 -t 10 --wrap 'sleep 45; exit 3')
JC=$(sb -J cpu-only -c 1 --mem=512M -t 5 --wrap 'sleep 45')
JA=$(sb -J arr --array=1-2 -t 5 --wrap 'sleep 45')
sleep 1
JP=$(sb -J wait-gpu4 --gres=gpu:4 -t 5 --wrap 'sleep 5')
ALL="$JE,$JK,$JG2,$JG1,$JC,$JA,$JP"
log "jobs: exit3=$JE killed=$JK gpu2=$JG2 gpu1=$JG1 cpu=$JC array=$JA pending=$JP"
for _ in $(seq 1 40); do
  [ "$(squeue -h -t R -u "$TUSER" | wc -l)" -ge 5 ] && [ -n "$(squeue -h -t PD -j "$JP")" ] && break; sleep 0.5
done
# the pending job's reason stays "None" until a scheduler pass (backfill: every 30 s)
for _ in $(seq 1 40); do
  [ "$(squeue -h -j "$JP" -o %r)" != None ] && break; sleep 1
done
squeue -u "$TUSER" >&2
squeue --json >"$OUT/squeue.json"
scontrol show job -d -o >"$OUT/scontrol_show_job.txt"
scontrol show job -d -o "$JG2" >"$OUT/scontrol_show_job_gpu2.txt"
sinfo --json >"$OUT/sinfo.json" 2>/dev/null || log "sinfo --json not supported"
PID=$(scontrol listpids "$JG2" | awk 'NR>1 && $1 != "-1" {print $1}' | tail -1)
cat "/proc/$PID/cgroup" >"$OUT/proc_cgroup_job$JG2.txt"
# environ: keep the Slurm/GPU variables only (the rest is the submitting shell's, machine-specific)
python3 - "/proc/$PID/environ" "$OUT/proc_environ_job$JG2.bin" <<'PY2'
import re, sys
keep = re.compile(rb"^(SLURM|CUDA_|GPU_|ROCR_|ZE_|USER=|HOME=|LOGNAME=|PWD=|ENVIRONMENT=)")
items = open(sys.argv[1], "rb").read().split(b"\0")
open(sys.argv[2], "wb").write(b"\0".join(i for i in items if keep.match(i)) + b"\0")
PY2
printf '%s\n' "exit3=$JE" "killed=$JK" "gpu2=$JG2" "gpu1=$JG1" "cpu=$JC" "array=$JA" "pending=$JP" "user=$TUSER" \
  "uid=$(id -u "$TUSER")" "node=$(hostname -s)" >"$OUT/jobs.env"
log "waiting for the short jobs to end, then cancelling the rest"
for _ in $(seq 1 120); do [ -z "$(squeue -h -j "$JG1,$JC" -t R 2>/dev/null)" ] && break; sleep 0.5; done
scancel "$JG2" "$JP"; sleep 1
for _ in $(seq 1 60); do [ -z "$(squeue -h -u "$TUSER" -t R,PD,CG 2>/dev/null)" ] && break; sleep 0.5; done
sleep 3   # slurmdbd gets the job ends asynchronously
sacct --json -S "$S0" -j "$ALL" >"$OUT/sacct.json"
sacct -P -n -X -S "$S0" -j "$ALL" \
  -o JobID,JobName,User,Account,Partition,State,ExitCode,Start,End,Elapsed,AllocTRES,NodeList >"$OUT/sacct_parsable.txt"
cat "$OUT/sacct_parsable.txt" >&2
log "recorded into $OUT"
