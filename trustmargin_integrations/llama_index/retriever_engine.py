"""The core pipeline (``tm.answer``) as a query engine: retrieve, answer both ways, arbitrate."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE, Response
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.llama_index.arbiter import (
    TrustMarginDecisionEvent,
    check_arbiter,
    dispatcher,
    kept_sources,
)
from trustmargin_integrations.llama_index.retrieval import PassageRetriever, RetrievedNodes
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.validation import check_k

__all__ = ["TrustMarginRetrieverQueryEngine"]


class TrustMarginRetrieverQueryEngine(BaseQueryEngine):
    """The core pipeline, ``tm.answer``, as a query engine: retrieve, answer, arbitrate.

    The scorer model generates both candidates with the paper's prompts (closed-book and
    with the passages), so the margins are exactly the paper's same-model setting. Use it
    when you have a retriever but no query engine yet; use :class:`TrustMarginQueryEngine` to
    keep an existing engine's answers.

    The ``Response`` holds the chosen answer, its source nodes (the retrieved nodes that
    entered the context when the RAG answer is kept, none for the closed-book answer),
    ``metadata["trustmargin"]`` (the Decision) and ``metadata["trustmargin_sources"]`` (every
    node that entered the context); when retrieval finds nothing the closed-book answer is
    returned (``reason="no_evidence"``).

    Args:
        retriever: a LlamaIndex retriever, or a project retriever (``BM25Index``,
            ``ElasticsearchRetriever``, anything with ``search(query, k)``), which is wrapped
            in a :class:`PassageRetriever`.
        tm: the arbiter; its backend generates and scores.
        k: at most this many passages per query (default: ``tm.config.top_k``).
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        callback_manager: defaults to the retriever's.
    """

    def __init__(
        self,
        retriever: BaseRetriever | Retriever,
        tm: TrustMargin,
        *,
        k: int | None = None,
        include_prompts: bool | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self.k = check_k(check_arbiter(tm).config.top_k if k is None else k, "k")
        if not isinstance(retriever, BaseRetriever):
            retriever = PassageRetriever(retriever, similarity_top_k=self.k)
        self.retriever = retriever
        self.tm = tm
        self.include_prompts = include_prompts
        super().__init__(callback_manager or retriever.callback_manager)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _answer(self, query_bundle: QueryBundle, nodes: list[NodeWithScore]) -> Response:
        retrieved = RetrievedNodes(nodes)
        decision = self.tm.answer(query_bundle.query_str, retrieved, self.k,
                                  include_prompts=self.include_prompts)
        metadata: dict[str, Any] = {}
        used = kept_sources(decision, retrieved.nodes[:decision.passages_used], metadata)
        dispatcher.event(TrustMarginDecisionEvent(decision=decision))
        return Response(response=decision.answer, source_nodes=used, metadata=metadata)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return self._answer(query_bundle, self.retriever.retrieve(query_bundle))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        nodes = await self.retriever.aretrieve(query_bundle)
        return await asyncio.to_thread(self._answer, query_bundle, nodes)
