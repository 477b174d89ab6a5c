"""Retrieval: any project retriever as a LlamaIndex retriever, nodes already retrieved as a
project retriever, and where :class:`TrustMarginQueryEngine` takes its evidence from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.nodes import node_to_passage, passage_to_node
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import check_k, check_retriever

__all__ = ["EVIDENCE_MODES", "PassageRetriever", "RetrievedNodes", "evidence_source",
           "no_retrieve_error"]

EVIDENCE_MODES = ("response", "retriever", "response_or_retriever")
"""What :class:`TrustMarginQueryEngine` scores the inner answer against (its ``evidence``)."""


class PassageRetriever(BaseRetriever):
    """A LlamaIndex retriever over any project retriever (anything with ``search(query, k)``).

    Works over the embedded ``BM25Index``, an ``ElasticsearchRetriever`` or your own class.
    Nodes carry the passage id as ``node_id``, the retriever score as ``score`` and the title
    in ``metadata["title"]`` (the only metadata the LLM sees); see :func:`passage_to_node`.

    Args:
        search: the project retriever.
        similarity_top_k: nodes per query.
        callback_manager: LlamaIndex callbacks.
    """

    def __init__(self, search: Retriever, *, similarity_top_k: int = 4,
                 callback_manager: CallbackManager | None = None) -> None:
        # Checked here (not only at the first query) so a wrong argument fails where it is
        # written; the hits themselves are checked by the core's retrieve_batch.
        self.search = check_retriever(search, "search")
        self.similarity_top_k = check_k(similarity_top_k, "similarity_top_k")
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = retrieve_batch(self.search, [query_bundle.query_str], self.similarity_top_k)[0]
        return [passage_to_node(p) for p in hits]


class RetrievedNodes:
    """The nodes already retrieved for one query, offered to the core as a Retriever."""

    def __init__(self, nodes: Sequence[NodeWithScore]) -> None:
        self.nodes = list(nodes)

    def search(self, query: str, k: int) -> list[Passage]:
        """The passages of the first ``k`` nodes (the query was already answered)."""
        return [node_to_passage(n) for n in self.nodes[:k]]


def evidence_source(evidence: Any, retriever: Any, k: Any, default_k: int
                    ) -> tuple[str, BaseRetriever | None, int | None]:
    """Check ``TrustMarginQueryEngine``'s evidence options; a project retriever is wrapped in
    a :class:`PassageRetriever` of ``k`` nodes (``default_k`` when ``k`` is None)."""
    if evidence not in EVIDENCE_MODES:
        raise InvalidInputError("evidence", f"is {evidence!r}",
                                f"use one of {list(EVIDENCE_MODES)}")
    if evidence == "response" and (retriever is not None or k is not None):
        raise InvalidInputError("retriever" if retriever is not None else "k",
                                "is only used with evidence='retriever' or "
                                "'response_or_retriever'",
                                "pass evidence='retriever' to score against the question's "
                                "top-k passages, or drop it")
    if k is not None:
        check_k(k, "k")
    if retriever is None or isinstance(retriever, BaseRetriever):
        return evidence, retriever, k
    check_retriever(retriever, "retriever")
    return evidence, PassageRetriever(retriever, similarity_top_k=default_k if k is None else k), k


def no_retrieve_error(engine: BaseQueryEngine) -> InvalidInputError:
    """The error for ``evidence='retriever'`` over an engine that cannot retrieve."""
    return InvalidInputError("retriever", f"is needed: a {type(engine).__name__} cannot "
                             "retrieve the question's passages itself",
                             "pass retriever=... (e.g. the PassageRetriever its inner engine "
                             "uses) to TrustMarginQueryEngine")
