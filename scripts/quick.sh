#!/usr/bin/env bash
# The developer's quick check: the unit tier (tests/unit: no model, no socket), ruff and mypy.
# The whole suite is CI's (.ci/run). VENV names another virtualenv (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${VENV:-.venv}/bin"
# This checkout's code, also when the virtualenv's editable install points at another one.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$bin/python" -m pytest -q -p no:cacheprovider tests/unit
"$bin/ruff" check .
"$bin/mypy"
