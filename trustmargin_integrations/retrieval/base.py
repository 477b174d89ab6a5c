"""The retriever protocol and the retrieval stage of the pipeline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import check_k, check_retriever


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-k passages for a query, best first.

    A retriever may also offer ``search_batch(queries, k)`` (one round trip for many
    queries); :func:`retrieve_batch` uses it when present.
    """

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages for ``query``."""
        ...


def retrieve_batch(retriever: Retriever, queries: Sequence[str], k: int) -> list[list[Passage]]:
    """Top-``k`` passages of every query, as :class:`Passage` records (possibly none).

    Raises:
        InvalidInputError: when ``retriever`` cannot search, ``k`` is not positive, or a hit
            is not a Passage.
    """
    check_retriever(retriever)
    check_k(k)
    batch = getattr(retriever, "search_batch", None)
    hits = (batch(list(queries), k) if callable(batch)
            else [retriever.search(q, k) for q in queries])
    for i, row in enumerate(hits):
        for j, hit in enumerate(row):
            if not isinstance(hit, Passage):
                raise InvalidInputError(f"retriever.search(queries[{i}])[{j}]",
                                        f"is a {type(hit).__name__}, not a Passage",
                                        "return trustmargin_integrations.Passage records")
    return [list(row) for row in hits]
