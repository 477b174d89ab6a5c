"""Benchmark contexts of a target size, shared by the benchmark scripts."""

from __future__ import annotations

from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.retrieval.bm25 import BM25Index


def fill(backend: HFBackend, index: BM25Index, question: str, size: int) -> list[str]:
    """BM25 passages in rank order, skipping any that would overflow ``size`` tokens, so
    each context lands just under its target size."""
    chosen: list[str] = []
    used = 0
    for passage in index.search(question, 200):
        text = passage.as_context()
        cost = backend.count_tokens(f"Passage {len(chosen)}: {text}") + 1
        if used + cost <= size:
            chosen.append(text)
            used += cost
    return chosen
