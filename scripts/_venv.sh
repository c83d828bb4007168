# Sourced by scripts/*: make .venv if missing and (re)install gpuwatch[dev,workload,plot] when
# pyproject.toml changed since the last install.
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.gpuwatch-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e '.[dev,workload,plot]'
  touch "$stamp"
fi
