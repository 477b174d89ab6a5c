"""Answer latency of a guarded LangChain chain against the plain chain, per policy.

The chain is LangChain's RAG tutorial shape on the embedded SmolLM2-135M (``LocalChatModel``,
greedy) over a BM25 retriever of the demo corpus, asked the demo's questions. Three ways,
interleaved per question so drift hits all alike (one untimed warm-up call of each first):

- ``plain``: the user's chain;
- ``guarded, always-RAG``: ``with_trustmargin(chain, tm)`` under the shipped policy (runs the
  chain once, scores nothing);
- ``guarded, paper's rule``: the same wrapper deciding by the margins (both sides + scoring),
  for scale;
- ``shadow on``: ``with_trustmargin(chain, rule, shadow=Shadow(log))``: the answer path runs
  the chain once and the paper's rule decides in the background queue. The queue is flushed
  (untimed) after each timed call, so the table shows the answer path itself; with a local
  model on the same CPU, back-to-back calls would share it with the shadow work (a hosted
  model would not).

Prints p50 / p90 seconds per question for ``invoke`` and for the first streamed chunk, and
the ratio to the plain chain at p50.

Usage::

    python benchmarks/fixed_policy.py --questions 10 --max-new-tokens 24
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.demo import demo_corpus, demo_questions
from trustmargin_integrations.langchain import (
    LocalChatModel,
    TrustMarginRetriever,
    with_trustmargin,
)
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.shadow import Shadow

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question in one sentence using the context.\n\nContext:\n{context}"),
    ("human", "{question}"),
])


def _seconds(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _first_chunk(runnable: Any, question: str) -> float:
    start = time.perf_counter()
    for _ in runnable.stream(question):
        break
    return time.perf_counter() - start


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] \
        if len(values) > 1 else values[0]


def main() -> None:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()

    backend = HFBackend.load("smollm2-135m", device="cpu", dtype="float32")
    shipped = TrustMargin.calibrated(backend, "shipped")
    rule = TrustMargin(backend)
    retriever = TrustMarginRetriever(retriever=BM25Index.build(demo_corpus()), k=args.k)
    llm = LocalChatModel.from_trustmargin(shipped, max_new_tokens=args.max_new_tokens)
    chain = ({"context": retriever | (lambda docs: "\n\n".join(d.page_content for d in docs)),
              "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser())
    shadow = Shadow(Path(tempfile.mkdtemp()) / "shadow.jsonl")
    shadowed = "shadow on (the rule decides in the queue)"
    ways = {"plain": chain,
            f"guarded, {shipped.config.decision_policy.label}": with_trustmargin(chain, shipped),
            f"guarded, {rule.config.decision_policy.label}": with_trustmargin(chain, rule),
            shadowed: with_trustmargin(chain, rule, shadow=shadow)}
    questions = [q.question for q in demo_questions()[:args.questions]]
    for runnable in ways.values():  # warm-up, untimed
        runnable.invoke(questions[0])
    invoke: dict[str, list[float]] = {name: [] for name in ways}
    first: dict[str, list[float]] = {name: [] for name in ways}
    for question in questions:
        for name, runnable in ways.items():
            invoke[name].append(_seconds(lambda r=runnable, q=question: r.invoke(q)))
            shadow.flush()  # untimed: the next timed call starts on an idle CPU
            first[name].append(_first_chunk(runnable, question))
    base = statistics.median(invoke["plain"])
    base_first = statistics.median(first["plain"])
    print(f"{len(questions)} questions, SmolLM2-135M on CPU, BM25 top-{args.k}, "
          f"{args.max_new_tokens} new tokens; seconds per question")
    print(f"{'way':<52} {'invoke p50':>10} {'p90':>7} {'vs plain':>9} "
          f"{'1st chunk p50':>13} {'vs plain':>9}")
    for name in ways:
        p50, p50_first = statistics.median(invoke[name]), statistics.median(first[name])
        print(f"{name:<52} {p50:>10.3f} {_p(invoke[name], 90):>7.3f} "
              f"{100 * (p50 / base - 1):>+8.1f}% {p50_first:>13.3f} "
              f"{100 * (p50_first / base_first - 1):>+8.1f}%")
    stats = shadow.stats
    print(f"shadow queue: {stats.done} decisions logged, {stats.failed} failed, "
          f"{stats.dropped} dropped")


if __name__ == "__main__":
    main()
