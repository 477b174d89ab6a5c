"""Retrievers that return :class:`~trustmargin_integrations.schema.Passage` records."""

from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.retrieval.corpus import load_corpus

__all__ = ["BM25Index", "Retriever", "load_corpus"]
