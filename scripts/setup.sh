#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtualenv in .venv with everything the project,
# its tests, notebooks and benchmarks need. Safe to re-run (pip skips what is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
# Exactly the CPU build of torch that lies on disk: a looser pin pulls a multi-GB CUDA build.
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" -e ".[all]"
# The notebooks run on a kernel named after this project, pointing at this virtualenv.
.venv/bin/python -m ipykernel install --sys-prefix --name trustmargin \
  --display-name "TrustMargin (.venv)" >/dev/null
