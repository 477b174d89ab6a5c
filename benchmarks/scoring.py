"""Scoring speed and faithfulness: naive passes vs shared prefix vs generation-cache reuse.

For each context size (about 500, 1000 and 2000 tokens) it takes real 2WikiMultihopQA
questions, retrieves BM25 passages from the shared 2Wiki paragraph corpus until the context
budget is full, and measures per question:

* naive: six separate full forward passes (one per answer x view), like the paper's code;
* shared prefix: candidates given, so one model session scores all six with no generation
  cache: the question+context prompt is prefilled once and the other views branch off it;
* cache reuse: both candidates generated in the session, then scored on the caches that
  generation built (the scoring call alone is timed);
* generation: Direct + RAG greedy generation alone (the baseline cost of any RAG system);
* max |difference| of the six log-likelihoods against the naive path.

Usage: python benchmarks/scoring.py [--questions 4] [--sizes 500 1000 2000] [--demo-memory]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.answers import answer_complete, clean_answer
from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.retrieval.corpus import load_corpus

sys.path.insert(1, str(Path(__file__).resolve().parent))
from contexts import fill

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw"
VIEWS = ("question_only", "question_context", "context_only")


def six_requests(views: object, direct: str, rag: str) -> list[ContinuationRequest]:
    """The six (answer x view) requests the arbiter sends for one question."""
    return [ContinuationRequest(getattr(views, view), answer)
            for answer in (direct, rag) for view in VIEWS]


def measure(backend: HFBackend, size: int, questions: list[str], index: BM25Index) -> dict:
    """Per-question timings (seconds) and the worst disagreement for one context size."""
    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=size, batch_size=1))
    naive, shared, reuse, gen, diffs, ctx = [], [], [], [], [], []
    for q in questions:
        prepared = tm.prepare({"question": q, "passages": fill(backend, index, q, size)})
        ctx.append(prepared.context.num_tokens)
        views = prepared.views

        start = time.perf_counter()
        direct = clean_answer(backend.generate([views.question_only], 20, stop=answer_complete)[0])
        rag = clean_answer(backend.generate([views.question_context], 20, stop=answer_complete)[0])
        gen.append(time.perf_counter() - start)

        reqs = six_requests(views, direct or "none", rag or "none")
        start = time.perf_counter()
        reference = backend.score_continuations(reqs)
        naive.append(time.perf_counter() - start)

        start = time.perf_counter()
        with backend.session() as session:
            fast = session.score(reqs)
        shared.append(time.perf_counter() - start)
        diffs.append(max(abs(f.mean - ref.mean) for f, ref in zip(fast, reference, strict=True)))

        with backend.session() as session:
            d = clean_answer(session.generate([views.question_only], 20,
                                              stop=answer_complete)[0]) or "none"
            r = clean_answer(session.generate([views.question_context], 20,
                                              stop=answer_complete)[0]) or "none"
            start = time.perf_counter()
            session.score(six_requests(views, d, r))
            reuse.append(time.perf_counter() - start)
    mean = statistics.mean
    return {"size": size, "ctx": mean(ctx), "naive": mean(naive), "shared": mean(shared),
            "reuse": mean(reuse), "gen": mean(gen), "diff": max(diffs)}


def print_table(row: dict, n: int) -> None:
    """One Markdown table per context size."""
    print(f"\n### context ~{row['size']} tokens (measured mean {row['ctx']:.0f}), "
          f"{n} questions, fp32, {torch.get_num_threads()} threads\n")
    print("| path | s / question | speed-up vs naive | % of Direct+RAG generation |")
    print("|---|---|---|---|")
    print(f"| naive: 6 full forward passes | {row['naive']:.3f} | 1.0x | "
          f"{100 * row['naive'] / row['gen']:.0f}% |")
    print(f"| shared prefix (candidates given) | {row['shared']:.3f} | "
          f"{row['naive'] / row['shared']:.1f}x | {100 * row['shared'] / row['gen']:.0f}% |")
    print(f"| generation-cache reuse (scoring extra) | {row['reuse']:.3f} | "
          f"{row['naive'] / row['reuse']:.1f}x | {100 * row['reuse'] / row['gen']:.0f}% |")
    print(f"| Direct+RAG generation alone | {row['gen']:.3f} | - | 100% |")
    print(f"\nmax |log-likelihood difference| vs naive: {row['diff']:.2e}")


def demo_peak_memory(limit: int) -> float | None:
    """Peak resident memory (GB) of `trustmargin demo --limit N`, measured by GNU time.

    getrusage(RUSAGE_CHILDREN) would count the pages of this (large) process that the child
    inherits before exec, so the measurement goes through /usr/bin/time instead.
    """
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    if timer is None:
        return None
    done = subprocess.run([timer, "-f", "%M", sys.executable, "-m", "trustmargin_integrations",
                           "demo", "--limit", str(limit)], check=True, capture_output=True,
                          text=True)
    return int(done.stderr.strip().splitlines()[-1]) / 1024 / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--demo-memory", action="store_true",
                        help="also run `trustmargin demo` and report its peak memory")
    args = parser.parse_args()

    backend = HFBackend.load(args.model, device="cpu", dtype="float32")
    index = BM25Index.build(load_corpus(DATA / "hipporag" / "2wikimultihopqa_corpus.json"))
    records = json.loads((DATA / "trustmargin" / "2wikimultihopqa_dev.json").read_text())
    questions = [r["question"] for r in records[: args.questions]]
    # One untimed pass so lazy initialisation does not land in the first measurement.
    measure(backend, 256, questions[:1], index)
    for size in args.sizes:
        print_table(measure(backend, size, questions, index), len(questions))
    if args.demo_memory:
        peak = demo_peak_memory(20)
        shown = "n/a (GNU time is not installed)" if peak is None else f"{peak:.2f} GB"
        print(f"\npeak memory of `trustmargin demo --limit 20`: {shown}")


if __name__ == "__main__":
    main()
