"""The side a Decision keeps: the retrieval-augmented or the closed-book answer.

The adapters return the kept side's own object (a LangChain chain's output, a LlamaIndex
response and its source nodes), so they need the side, not only the text.
"""

from __future__ import annotations

from typing import Literal

from trustmargin_integrations.schema import Decision

Side = Literal["rag", "direct"]
"""One side of an arbitration: the retrieval-augmented or the closed-book answer."""


def chosen_side(decision: Decision) -> Side:
    """Which side's text the decision returns. ``source`` says it, except for ``"agree"``
    (the two answers normalize equal), where the returned text tells which one was kept."""
    if decision.source in ("rag", "direct"):
        return decision.source
    rag = decision.rag_raw if decision.rag_raw is not None else decision.rag_answer
    return "rag" if decision.answer.strip() == rag.strip() else "direct"
