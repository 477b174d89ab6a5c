"""Retrievers that return :class:`~trustmargin_integrations.schema.Passage` records.

The names load on first use (PEP 562), so importing :mod:`.base` (the ``Retriever``
protocol the arbiter reads) loads neither BM25 nor numpy nor the stemmer.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trustmargin_integrations.retrieval.base import Retriever
    from trustmargin_integrations.retrieval.bm25 import BM25Index
    from trustmargin_integrations.retrieval.corpus import load_corpus

_MODULE_OF = {"BM25Index": "bm25", "Retriever": "base", "load_corpus": "corpus"}

__all__ = ["BM25Index", "Retriever", "load_corpus"]


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
