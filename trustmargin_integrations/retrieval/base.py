"""The retriever protocol."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from trustmargin_integrations.schema import Passage


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the top-k passages for a query, best first."""

    def search(self, query: str, k: int) -> list[Passage]:
        """Top-``k`` passages for ``query``."""
        ...
