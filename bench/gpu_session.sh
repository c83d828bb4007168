#!/usr/bin/env bash
# One lent-GPU session's measurements in one run of about 7 minutes: bench/gpu_probe.py
# (NVML call costs, GPM coverage, utilization window, recordings of five workloads), then
# `gpuwatch validate --device cuda` on the real NVML backend with time compression (every
# reference-workload scenario, daemon + agent + classifier, NVML recorded per scenario).
# Everything lands in OUT_DIR and is packed into OUT_DIR/gpu-session.tar.gz (the device tool
# brings back at most 8 files, so one archive carries them all).
#
#   bench/gpu_session.sh OUT_DIR
#   PROBE_BUDGET_S=100 VALIDATE_S=15 VIRTUAL_MINUTES=6 VALIDATE_CPUS=8 bench/gpu_session.sh OUT_DIR
#
# VALIDATE_CPUS pins each scenario's job to that many cores (a GPU's share of a node; the
# H200 runs in tests/gpu/fixtures/h200/run2 and run3 used 8).
#
# PYTHON (default python3) must import torch with CUDA and gpuwatch's dependencies; on a
# machine without them, install wheels first (docs/gpu.md, "Recording a real GPU").
# Each stage is capped by `timeout`, and the archive is written even when a stage fails.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_session.sh OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
pack() { tar -czf "$out/gpu-session.tar.gz" -C "$out" --exclude gpu-session.tar.gz . 2>/dev/null; }
trap pack EXIT
{
  date -u +%FT%TZ; uname -a; nvidia-smi 2>&1 | head -20
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,power.limit,power.default_limit,clocks.max.sm,mig.mode.current --format=csv 2>&1
  "$py" -c 'import sys, pynvml, torch; print(sys.version); print("nvidia-ml-py", pynvml.__file__); print("torch", torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))' 2>&1
} > "$out/system.txt" 2>&1
cat "$out/system.txt"
start=$SECONDS
timeout --kill-after=10 $((${PROBE_BUDGET_S:-100} + 60)) "$py" bench/gpu_probe.py "$out/probe" \
  --budget-s "${PROBE_BUDGET_S:-100}" --record-seconds "${RECORD_S:-10}" 2>&1 | tee "$out/probe.log"
echo "probe: $((SECONDS - start)) s"
vstart=$SECONDS
timeout --kill-after=10 "${VALIDATE_TIMEOUT_S:-420}" "$py" -m gpuwatch validate --device cuda \
  --duration "${VALIDATE_S:-15}" --virtual-minutes "${VIRTUAL_MINUTES:-6}" --cpus "${VALIDATE_CPUS:-8}" \
  --out "$out/validate" \
  --format json ${VALIDATE_SCENARIOS:+--scenarios "$VALIDATE_SCENARIOS"} > "$out/validate.json" 2> "$out/validate.log"
vstatus=$?
cat "$out/validate/validate.txt" 2>/dev/null || tail -n 40 "$out/validate.log"
echo "validate: $((SECONDS - vstart)) s, exit $vstatus; whole session $((SECONDS - start)) s"
