#!/usr/bin/env bash
# Run every reference-workload scenario on the GPU (an H200 or any CUDA card) and keep,
# per scenario, its JSON summary (<name>.json), its activity stream (<name>.jsonl) and its
# log (<name>.log) in the output folder given as the only argument.
#
#   bench/gpu_validate.sh OUT_DIR            # PER_SCENARIO_S=25 by default
#   PER_SCENARIO_S=20 bench/gpu_validate.sh /tmp/validate
#
# Budget: 10 scenarios x (PER_SCENARIO_S + ~10 s start-up) stays under 8 minutes at 25 s;
# every run is also capped by `timeout` so one hung scenario cannot eat the rest.
# Then `gpuwatch validate --device cuda` scores every scenario end to end (daemon + NVML
# agent, classified against its expected cause) for VALIDATE_S (default 240) s each: real
# time, no compression, so about 10 x (VALIDATE_S + 15) s more; VALIDATE_SCENARIOS=a,b
# narrows it. Confusion matrix: OUT_DIR/validate.txt (+ validate/validate.json, recordings).
# Exit status: non-zero if any scenario failed or was misclassified. Needs gpuwatch[workload].
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_validate.sh OUT_DIR}
mkdir -p "$out"
per=${PER_SCENARIO_S:-25}
py=${PYTHON:-.venv/bin/python}
[[ -x $py ]] || py=python3
scenarios=(healthy idle input-bound small-batch fp32 amp memory-pressure comm-bound cpu-only idle-after-start)
failed=()
start=$SECONDS
"$py" -c 'from gpuwatch.workload._torch import import_torch; t = import_torch()
print("torch", t.__version__, "cuda", t.cuda.is_available(), t.cuda.device_count())' \
  | tee "$out/torch.txt"
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv > "$out/nvidia-smi.csv" 2>&1 || true
for name in "${scenarios[@]}"; do
  rm -f "$out/$name.jsonl"
  if timeout --kill-after=10 $((per + 120)) "$py" -m gpuwatch workload --scenario "$name" --duration "$per" \
      --device cuda --json --activity-file "$out/$name.jsonl" > "$out/$name.json" 2> "$out/$name.log"; then
    tail -n 1 "$out/$name.log"
  else
    echo "FAILED: $name (see $out/$name.log)"
    failed+=("$name")
  fi
done
echo "all scenarios: $((SECONDS - start)) s; failed: ${failed[*]:-none}"
# end to end on the real GPU: daemon + agent (NVML) per scenario, classified and scored;
# confusion matrix in validate.txt / validate.json, recordings under validate/
vstart=$SECONDS
"$py" -m gpuwatch validate --device cuda --duration "${VALIDATE_S:-240}" --out "$out/validate" \
  ${VALIDATE_SCENARIOS:+--scenarios "$VALIDATE_SCENARIOS"} > "$out/validate.txt"
vstatus=$?
cat "$out/validate.txt"
echo "validate: $((SECONDS - vstart)) s, exit $vstatus"
[[ ${#failed[@]} -eq 0 && $vstatus -eq 0 ]]
