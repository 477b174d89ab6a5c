"""Preparation speed: ``TrustMargin.prepare`` one question at a time vs ``prepare_batch``.

Preparing a question (validation, the context budget, the passage context cut to it, the
three rendered views) runs on the CPU before any model call; on a GPU machine it was 35% of
the wall time at batch 32 (issue "GPU path"). ``prepare_batch`` counts the tokens of every
question of a batch in one tokenizer call per stage, which a fast tokenizer spreads over the
cores. Only the tokenizer matters here, so the model is the embedded SmolLM2-135M's (its
weights are loaded but never run).

Inputs are real 2WikiMultihopQA dev questions with BM25 passages from the HippoRAG 2Wiki
corpus, filled in rank order to about ``--context-tokens`` (``benchmarks/gpu.py``'s loader).
Each batch size is timed ``--repeats`` times, interleaved with the one-at-a-time path, and
the best time is kept; the batched results are checked equal to the one-at-a-time ones.

Usage: python benchmarks/prepare.py [--questions 64] [--context-tokens 2048]
       [--batch-sizes 1 8 32 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(1, str(Path(__file__).resolve().parent))
from gpu import DEFAULT_DATA, Clock, as_input, best_times, load_items

from trustmargin_integrations import TrustMargin, TrustMarginConfig


def main(argv: Sequence[str] | None = None) -> list[dict[str, float]]:
    """Time both paths at each batch size and print a Markdown table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--context-tokens", type=int, default=2048)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)

    tm = TrustMargin.from_pretrained(
        "smollm2-135m", config=TrustMarginConfig(max_context_tokens=args.context_tokens))
    items, source = load_items(tm.backend, args.data, args.questions, args.context_tokens)
    inputs = [as_input(item) for item in items]
    clock = Clock(torch.device("cpu"))

    def one_at_a_time() -> list[Any]:
        return [tm.prepare(x) for x in inputs]

    alone, rows = one_at_a_time(), []
    for size in args.batch_sizes:
        def batched(size: int = size) -> list[Any]:
            return [p for start in range(0, len(inputs), size)
                    for p in tm.prepare_batch(inputs[start:start + size])]

        one_s, batch_s = best_times(clock, [one_at_a_time, batched], args.repeats)
        together = batched()
        same = all((a.context, a.views) == (b.context, b.views)
                   for a, b in zip(alone, together, strict=True))
        rows.append({"batch_size": size, "batched_ms": 1000 * batch_s / len(inputs),
                     "one_ms": 1000 * one_s / len(inputs), "same": same})

    tokens = sum(p.context.num_tokens for p in alone) / len(alone)
    print(f"{len(inputs)} questions, mean context {tokens:.0f} tokens; {source}; "
          f"{os.cpu_count()} CPUs; best of {args.repeats}\n")
    print("| batch size | prepare one at a time (ms/q) | prepare_batch (ms/q) | speed-up "
          "| same contexts and views |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['batch_size']} | {row['one_ms']:.2f} | {row['batched_ms']:.2f} | "
              f"{row['one_ms'] / row['batched_ms']:.2f}x | {row['same']} |")
    return rows


if __name__ == "__main__":
    main()
