"""Serving-fleet throughput: the arbiter's eval workload over 1-3 llama.cpp servers x requests in
flight, against the local transformers backend on the same questions, all in one run::

    OMP_NUM_THREADS=1 python benchmarks/fleet.py --questions 16 --context-tokens 32

Each question generates both candidates and scores the six likelihoods (the arbiter's whole
per-question work, one batch of all questions, as ``trustmargin eval`` runs a chunk). The
servers are llama-cpp-python child processes on 127.0.0.1 serving the embedded SmolLM2-135M
GGUF, one CPU thread each; the members reach them through
:class:`~trustmargin_integrations.backends.fleet.Fleet`. The fleet's probe (one request per
member) runs before the clock starts. Questions and passages are real: PRAG's BM25 top-3
passages for ComplexWebQuestions (``--data``; read in place, never copied). Prints a markdown
table (questions/s, the ratio to the local backend, decisions equal to the local run's and
to the one-server run's, the load average around each setting); nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from remote import DEFAULT_FILE, load_questions

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.fleet import Fleet
from trustmargin_integrations.backends.loading import cpu_threads, load_backend
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.model_store import REGISTRY
from trustmargin_integrations.schema import Decision

# The development server helper lives with the tests, not in the library.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from llama_cpp_server import LlamaCppServer

MODEL = "smollm2-135m"


def timed(tm: TrustMargin, questions: list[dict[str, Any]]) -> tuple[float, list[Decision]]:
    start = time.perf_counter()
    decisions = tm.arbitrate_batch(questions)
    return time.perf_counter() - start, decisions


def same_sources(a: list[Decision], b: list[Decision]) -> int:
    return sum(x.source == y.source for x, y in zip(a, b, strict=True))


def load() -> str:
    """The one-minute load average: the machine is shared, so each row says what it ran in."""
    return f"{os.getloadavg()[0]:.1f}"


def run(args: argparse.Namespace) -> None:
    questions = load_questions(args.data, args.questions, args.offset)
    config = TrustMarginConfig(max_context_tokens=args.context_tokens,
                               batch_size=len(questions))
    local_backend = load_backend(MODEL)
    local = TrustMargin(local_backend, config)
    local.arbitrate_batch(questions[:1])  # warm-up: first-call allocations
    began = load()
    local_s, reference = timed(local, questions)
    print(f"  local: {local_s:.1f} s", file=sys.stderr, flush=True)
    threads = cpu_threads(local_backend.device)
    rows: list[tuple[str, int | str, float, str, int, str]] = [
        (f"local transformers (fp32, {threads} thread{'s' * (threads != 1)})", "-", local_s,
         "-", len(questions), f"{began} -> {load()}")]
    gguf = REGISTRY[MODEL].locate()
    first: list[Decision] | None = None
    with ExitStack() as stack:
        servers = [stack.enter_context(LlamaCppServer(gguf, alias=MODEL, n_ctx=args.n_ctx,
                                                      n_threads=1))
                   for _ in range(max(args.servers))]
        # llama-cpp-python answers one request at a time, so a request may wait behind all
        # the others in flight: the bounds must cover the queue.
        members = [stack.enter_context(OpenAICompatBackend(
            server.url, MODEL, local_backend.tokenizer, max_concurrency=max(args.in_flight),
            model_id=local_backend.model_id, timeout_s=3600, read_timeout_s=3600))
            for server in servers]
        for count in args.servers:
            for in_flight in args.in_flight:
                fleet = Fleet(members[:count], in_flight=in_flight)
                fleet.verify()
                began = load()
                seconds, decisions = timed(TrustMargin(fleet, config), questions)
                first = first or decisions
                rows.append((f"{count} llama.cpp server{'s' * (count > 1)}", in_flight, seconds,
                             f"{same_sources(decisions, first)}/{len(questions)}",
                             same_sources(decisions, reference), f"{began} -> {load()}"))
                print(f"  {count} server(s), {in_flight} in flight: {seconds:.1f} s",
                      file=sys.stderr, flush=True)
    print(f"\nServing fleet: {len(questions)} ComplexWebQuestions questions (offset "
          f"{args.offset}), context <= {args.context_tokens} tokens, SmolLM2-135M (servers: "
          f"the Q4_1 GGUF in llama-cpp-python, 1 thread each; local: its fp32 "
          f"dequantization), {os.cpu_count()} CPU cores\n")
    print("| backend | in flight per server | seconds | questions/s | vs local | "
          "decisions = 1 server's | decisions = local's | load average (1 min) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, in_flight, seconds, same_first, same_local, loads in rows:
        qps = len(questions) / seconds
        print(f"| {name} | {in_flight} | {seconds:.1f} | {qps:.3f} | "
              f"{local_s / seconds:.2f}x | {same_first} | {same_local}/{len(questions)} | "
              f"{loads} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_FILE,
                        help="question file with passages (PRAG layout)")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--context-tokens", type=int, default=32)
    parser.add_argument("--servers", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--n-ctx", type=int, default=1024)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
