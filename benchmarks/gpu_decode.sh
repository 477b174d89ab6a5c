#!/usr/bin/env bash
# One GPU run of the decode-loop comparison (benchmarks/decode_loops.py), sized to finish in
# about 5 minutes on an H100: the plain loop against the static-cache loop with and without a
# CUDA graph, Llama-3.2-1B and Llama-3.1-8B shapes (random weights), batch 1 and 8, 2k-token
# prompts, bf16; then the same loops in fp32 on the 1B shape (tokens must match the plain
# loop's). Needs only torch and transformers there, plus the tokenizer folder written here by
# `python benchmarks/gpu.py --save-tokenizer runs/gpu-tokenizer` (carried to the machine).
#
#   OUT=results/gpu bash benchmarks/gpu_decode.sh   # writes decode.{json,md}, a log, versions
set -uo pipefail
OUT=${OUT:-runs/gpu-decode}
PYTHON=${PYTHON:-python3}
TOKENIZER=${TOKENIZER:-runs/gpu-tokenizer}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
"$PYTHON" -c 'import platform, torch, transformers; print(platform.python_version(), torch.__version__, transformers.__version__, torch.version.cuda)' >"$OUT/versions.txt" 2>&1
timeout 300 "$PYTHON" benchmarks/decode_loops.py --shapes 1b 8b --batch-sizes 1 8 \
    --new-tokens 32 --repeats 3 --tokenizer "$TOKENIZER" --out "$OUT/decode.json" \
    2>"$OUT/decode.log"
echo "bf16 run: exit $?" | tee -a "$OUT/decode.log"
timeout 90 "$PYTHON" benchmarks/decode_loops.py --dtype float32 --shapes 1b --batch-sizes 8 \
    --prompt-tokens 1024 --new-tokens 16 --repeats 1 --tokenizer "$TOKENIZER" \
    --out "$OUT/decode-fp32.json" 2>"$OUT/decode-fp32.log"
echo "fp32 run: exit $?" | tee -a "$OUT/decode-fp32.log"
