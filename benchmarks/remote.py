"""Remote scoring: throughput against a llama.cpp server, and agreement with the local backend.

Throughput (questions/second with 1, 4 and 16 requests in flight; each question generates
both candidates and scores the six likelihoods, all through the server)::

    python benchmarks/remote.py throughput --questions 16 --context-tokens 128

Agreement with the local transformers backend (same candidates, scored by both)::

    python benchmarks/remote.py agreement --questions 20 --context-tokens 128

Both start a llama-cpp-python server on 127.0.0.1 serving the embedded SmolLM2 GGUF unless
``--url``/``--model`` point at a running server. Questions and passages are real: PRAG's BM25
top-3 DPR-wiki passages for ComplexWebQuestions (``--data``; read in place, never copied).
Prints a table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.schema import Decision

# The development server helper lives with the tests, not in the library.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from llama_cpp_server import LlamaCppServer

DEFAULT_DATA = Path(os.environ.get("TRUSTMARGIN_DATA_DIR", "/work/shared/data/raw"))
DEFAULT_FILE = DEFAULT_DATA / "prag" / "complexwebquestions_total.json"


def load_questions(path: Path, n: int, offset: int) -> list[dict[str, Any]]:
    """The first ``n`` records (after ``offset``) as arbitration inputs (question + passages)."""
    records = json.loads(path.read_text(encoding="utf-8"))[offset:offset + n]
    return [{"id": str(r.get("test_id", i)), "question": r["question"],
             "passages": list(r["passages"])} for i, r in enumerate(records)]


@contextmanager
def server_url(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """``(url, model)`` of ``--url`` or of a fresh local llama.cpp server."""
    if args.url:
        yield args.url, args.model
        return
    from trustmargin_integrations.model_store import REGISTRY

    gguf = REGISTRY["smollm2-135m"].locate()
    with LlamaCppServer(gguf, alias="smollm2-135m", n_ctx=args.n_ctx,
                        n_threads=args.threads) as server:
        yield server.url, server.alias


def remote_backend(url: str, model: str, tokenizer: Any, concurrency: int
                   ) -> OpenAICompatBackend:
    # llama-cpp-python serves one request at a time, so a request may wait behind all the
    # others in flight: the timeout must cover the queue, not just one request.
    return OpenAICompatBackend(url, model, tokenizer, max_concurrency=concurrency,
                               model_id="smollm2-135m", timeout_s=3600, read_timeout_s=3600)


def local_tokenizer() -> Any:
    from trustmargin_integrations.backends.openai_compat import load_tokenizer

    return load_tokenizer("smollm2-135m")


def throughput(args: argparse.Namespace) -> None:
    questions = load_questions(args.data, args.questions, args.offset)
    tokenizer = local_tokenizer()
    rows = []
    # One batch for all questions, so the in-flight bound is the only limit.
    config = TrustMarginConfig(max_context_tokens=args.context_tokens,
                               batch_size=len(questions))
    with server_url(args) as (url, model):
        for inflight in args.inflight:
            with remote_backend(url, model, tokenizer, inflight) as backend:
                backend.generate(["warm-up"], 1)
                sent = backend.requests_sent
                start = time.perf_counter()
                decisions = TrustMargin(backend, config).arbitrate_batch(questions)
                elapsed = time.perf_counter() - start
                scored = sum(d.m is not None for d in decisions)
                rows.append((inflight, len(questions), scored, backend.requests_sent - sent,
                             elapsed, len(questions) / elapsed))
            print(f"  in flight {inflight:>2}: {elapsed:7.1f} s", file=sys.stderr, flush=True)
    print(f"\nremote backend throughput ({args.url or 'local llama-cpp-python server'}, "
          f"SmolLM2-135M Q4_1, context <= {args.context_tokens} tokens, "
          f"generation + six likelihoods per question)")
    print(f"{'in flight':>9} | {'questions':>9} | {'scored':>6} | {'requests':>8} | "
          f"{'seconds':>8} | {'questions/s':>11}")
    print("-" * 68)
    for inflight, n, scored, requests, elapsed, qps in rows:
        print(f"{inflight:>9} | {n:>9} | {scored:>6} | {requests:>8} | {elapsed:8.1f} | "
              f"{qps:11.3f}")


def _six(d: Decision) -> list[float]:
    assert d.direct_likelihoods is not None and d.rag_likelihoods is not None
    out = []
    for lk in (d.direct_likelihoods, d.rag_likelihoods):
        out += [lk.question_only, lk.question_context, lk.context_only]
    return out


def agreement(args: argparse.Namespace) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    questions = load_questions(args.data, args.questions, args.offset)
    config = TrustMarginConfig(max_context_tokens=args.context_tokens,
                               skip_scoring_when_agree=False, batch_size=4)
    local = TrustMargin(HFBackend.load("smollm2-135m"), config)
    start = time.perf_counter()
    reference = local.arbitrate_batch(questions)
    print(f"  local: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    with server_url(args) as (url, model), \
            remote_backend(url, model, local.backend.tokenizer, args.concurrency) as backend:
        remote = TrustMargin(backend, config)
        start = time.perf_counter()
        generated = backend.generate(
            [p.views.question_only for p in (remote.prepare(q) for q in questions)],
            config.max_new_tokens)
        print(f"  remote generation: {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
        same_candidates = [dict(q, direct_answer=r.direct_answer, rag_answer=r.rag_answer)
                           for q, r in zip(questions, reference, strict=True)]
        start = time.perf_counter()
        scored = remote.arbitrate_batch(same_candidates)
        print(f"  remote scoring: {time.perf_counter() - start:.1f} s", file=sys.stderr,
              flush=True)
    from trustmargin_integrations.answers import clean_answer

    gen_same = sum(clean_answer(g) == r.direct_answer
                   for g, r in zip(generated, reference, strict=True))
    gaps, m_gaps, agree, both = [], [], 0, 0
    for ref, got in zip(reference, scored, strict=True):
        if ref.m is None or got.m is None:
            continue
        both += 1
        gaps += [abs(a - b) for a, b in zip(_six(ref), _six(got), strict=True)]
        m_gaps.append(abs(ref.m - got.m))
        agree += ref.source == got.source
    print(f"\nremote (llama.cpp, Q4_1 quantized) vs local (transformers, dequantized fp32), "
          f"{len(questions)} ComplexWebQuestions questions, context <= {args.context_tokens} "
          f"tokens")
    print(f"{'metric':<44} | value")
    print("-" * 60)
    print(f"{'questions scored by both':<44} | {both}")
    if gaps:
        q = sorted(gaps)
        print(f"{'|delta l| per likelihood: mean':<44} | {statistics.mean(gaps):.4f}")
        print(f"{'|delta l| per likelihood: 95th percentile':<44} | "
              f"{q[min(len(q) - 1, int(0.95 * len(q)))]:.4f}")
        print(f"{'|delta l| per likelihood: max':<44} | {max(gaps):.4f}")
        print(f"{'|delta M|: mean / max':<44} | {statistics.mean(m_gaps):.4f} / "
              f"{max(m_gaps):.4f}")
        print(f"{'decision agreement (same source)':<44} | {agree}/{both} = {agree / both:.1%}")
    print(f"{'greedy Direct answer identical after cleaning':<44} | {gen_same}/{len(questions)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["throughput", "agreement"])
    parser.add_argument("--data", type=Path, default=DEFAULT_FILE,
                        help="question file with passages (PRAG layout)")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--context-tokens", type=int, default=128)
    parser.add_argument("--inflight", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--concurrency", type=int, default=4, help="agreement mode")
    parser.add_argument("--url", help="a running OpenAI-compatible server (default: start one)")
    parser.add_argument("--model", default="smollm2-135m", help="served model name with --url")
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    {"throughput": throughput, "agreement": agreement}[args.mode](args)


if __name__ == "__main__":
    main()
