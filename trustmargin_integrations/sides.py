"""The side a Decision keeps: the retrieval-augmented or the closed-book answer.

The adapters return the kept side's own object (a LangChain chain's output, a LlamaIndex
response and its source nodes), so they need the side, not only the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trustmargin_integrations.schema import Decision
from trustmargin_integrations.vocabulary import Side


def chosen_side(decision: Decision) -> Side:
    """Which side's text the decision returns. ``source`` says it, except for ``"agree"``
    (the two answers normalize equal), where the returned text tells which one was kept."""
    if decision.source in ("rag", "direct"):
        return decision.source
    rag = decision.rag_raw if decision.rag_raw is not None else decision.rag_answer
    return "rag" if decision.answer.strip() == rag.strip() else "direct"


@dataclass(frozen=True)
class BothAnswers:
    """A user's chain run both ways on one question, nothing scored: its closed-book answer
    (``direct``), its answer as deployed (``rag``) and the passages its retriever returned
    for that answer, as text. :meth:`record` gives the labeled record fields the domain
    check reads (``direct_answer``, ``rag_answer``, ``passages``)."""

    direct: str
    rag: str
    passages: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        """The labeled record's fields: ``direct_answer``, ``rag_answer``, ``passages``."""
        return {"direct_answer": self.direct, "rag_answer": self.rag,
                "passages": list(self.passages)}

    @classmethod
    def from_record(cls, value: Mapping[str, Any]) -> BothAnswers:
        """The inverse of :meth:`record` (a stored value read back)."""
        return cls(direct=str(value["direct_answer"]), rag=str(value["rag_answer"]),
                   passages=tuple(str(p) for p in value["passages"]))
