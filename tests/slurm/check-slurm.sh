#!/usr/bin/env bash
# Smoke test for the cluster started by tests/slurm/start-slurm.sh: two GPU jobs, JSON output,
# cgroup and environ of job processes, an srun step, a REST submission, sacct. Exits non-zero
# (and says what) when something the gpuwatch tests rely on does not hold.
set -euo pipefail
fail() { echo "CHECK FAILED: $*" >&2; exit 1; }
D=$(mktemp -d /tmp/slurmcheck.XXXX); chmod 777 "$D"; cd "$D"
cat > job.py <<'PY'
import os, time
print("JOB", os.environ["SLURM_JOB_ID"], "CVD", os.environ.get("CUDA_VISIBLE_DEVICES"),
      "JOB_GPUS", os.environ.get("SLURM_JOB_GPUS"), flush=True)
time.sleep(20)
PY
J1=$(sbatch --parsable -J check-gpu2 --gres=gpu:2 -o "$D/%j.out" --wrap "python3 $D/job.py")
J2=$(sbatch --parsable -J check-gpu1 --gres=gpu:fake:1 -o "$D/%j.out" --wrap "python3 $D/job.py")
trap 'scancel $J1 $J2 2>/dev/null || true' EXIT
for _ in $(seq 1 40); do [ "$(squeue -h -t R -j "$J1,$J2" | wc -l)" = 2 ] && break; sleep 0.5; done
[ "$(squeue -h -t R -j "$J1,$J2" | wc -l)" = 2 ] || { squeue; fail "jobs $J1 $J2 not both running"; }
for _ in $(seq 1 20); do [ -s "$D/$J1.out" ] && [ -s "$D/$J2.out" ] && break; sleep 0.5; done
cat "$D/$J1.out" "$D/$J2.out"
grep -q "JOB_GPUS 0,1" "$D/$J1.out" || fail "gpu:2 job did not get SLURM_JOB_GPUS=0,1"
squeue --json | python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
for j in jobs:
    print("squeue-json", j["job_id"], j["job_state"], j.get("gres_detail"))
assert any(j.get("gres_detail") for j in jobs), "no gres_detail in squeue --json"
'
scontrol show job -d -o "$J1" | grep -o 'JobState=[A-Z]*\|GRES=[^ ]*'
for p in $(scontrol listpids "$J1" | awk 'NR>1{print $1}'); do
  echo "pid $p $(cat /proc/"$p"/comm): cgroup=$(grep -o 'job_[0-9]*' /proc/"$p"/cgroup | sort -u | tr '\n' ' ')" \
       "env=$(tr '\0' '\n' </proc/"$p"/environ | grep '^SLURM_JOB_ID=' || true)"
done
srun --gres=gpu:1 bash -c 'echo "srun step: CVD=$CUDA_VISIBLE_DEVICES STEP_GPUS=$SLURM_STEP_GPUS"'
if [ -S /run/slurmrestd/slurmrestd.sock ]; then
  curl -s --unix-socket /run/slurmrestd/slurmrestd.sock -H 'Content-Type: application/json' \
    -X POST http://localhost/slurm/v0.0.38/job/submit \
    -d "{\"script\":\"#!/bin/bash\\nid -un\",\"job\":{\"name\":\"rest\",\"current_working_directory\":\"$D\",\"environment\":{\"PATH\":\"/usr/bin:/bin\"},\"gres\":\"gpu:1\",\"standard_output\":\"$D/rest.out\"}}" \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print("rest submit job_id", d.get("job_id"), d["errors"]); assert not d["errors"]'
fi
scancel "$J1" "$J2"; sleep 3
if command -v sacct >/dev/null && sacct -n -X -j "$J1" >/dev/null 2>&1; then
  sacct -X -j "$J1,$J2" -o jobid,jobname,state,exitcode,alloctres%50
  sacct -n -X -P -j "$J1" -o alloctres | grep -q 'gres/gpu=2' || fail "sacct AllocTRES lacks gres/gpu=2"
  sacct --json -j "$J1" | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("sacct-json", j["job_id"], j["state"]["current"])'
fi
echo "CHECK OK ($D)"
