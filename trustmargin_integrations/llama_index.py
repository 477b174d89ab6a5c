"""LlamaIndex adapter: a response-level postprocessor, a query-engine wrapper, a BM25
retriever and a local LLM.

LlamaIndex node postprocessors run before synthesis and never see an answer, so the
arbitration lives in :class:`TrustMarginPostprocessor`, which works on whole responses,
and in :class:`TrustMarginQueryEngine`, which wraps any query engine. Scoring is the core's
(:class:`~trustmargin_integrations.arbiter.TrustMargin`); nothing is re-implemented here.

The scorer is the arbiter's own local model. When the inner engine answers with another
LLM, the margins say how the scorer model judges those answers (does its memory accept the
RAG answer, do the passages bind it to the question), not how the generating LLM would; the
paper's ``tau = -1.5`` is calibrated for same-model candidates, so re-check it on your data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import ConfigDict, Field

from trustmargin_integrations.answers import clean_answer
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import QUESTION_ONLY_TEMPLATE
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.schema import Decision

__all__ = [
    "METADATA_KEY",
    "BM25Retriever",
    "LocalLLM",
    "TrustMarginPostprocessor",
    "TrustMarginQueryEngine",
    "node_to_passage",
]

METADATA_KEY = "trustmargin"
"""The one key of ``Response.metadata`` this adapter writes: the :class:`Decision`."""

def node_to_passage(node: NodeWithScore) -> str:
    """The passage text the scorer sees for a node: ``title: text`` when titled.

    Only the node's text and its ``title`` metadata enter the prompt, matching the core's
    ``Passage.as_context()``; other metadata (file paths, ids) would only add noise.
    """
    text = node.node.get_content(metadata_mode=MetadataMode.NONE)
    title = node.node.metadata.get("title")
    if isinstance(title, str) and title.strip():
        return f"{title}: {text}"
    return text


def _as_response(value: Any, field: str) -> Response:
    if isinstance(value, Response):
        return value
    if isinstance(value, (StreamingResponse, PydanticResponse)):
        return value.get_response()
    raise InvalidInputError(field, f"must be a Response or a string, got {type(value).__name__}",
                            "pass the query engine's Response (or its text)")


class TrustMarginPostprocessor:
    """Response-level arbitration: (query, closed-book answer, RAG answer) -> Response.

    The returned ``Response`` holds the chosen text, the RAG answer's source nodes (kept
    whichever answer wins: they are the evidence that was weighed) and the RAG response's
    metadata plus one reserved key, ``metadata["trustmargin"]``: the core
    :class:`~trustmargin_integrations.schema.Decision` with margins and audit fields.

    Args:
        tm: the arbiter; its backend is the scorer model.
        clean_answers: cut both answers to their first line and drop ``Answer:`` labels
            before scoring (the short-answer form the margins are defined on).
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
    """

    def __init__(self, tm: TrustMargin, *, clean_answers: bool = True,
                 include_prompts: bool | None = None) -> None:
        self.tm = tm
        self.clean_answers = clean_answers
        self.include_prompts = include_prompts

    def _answer(self, value: Response | str | None, field: str) -> str | None:
        if value is None:
            return None
        text = value if isinstance(value, str) else (_as_response(value, field).response or "")
        return clean_answer(text) if self.clean_answers else text

    def _prepare(
        self,
        query: str | QueryBundle,
        direct: Response | str | None,
        rag: Response | str,
        source_nodes: Sequence[NodeWithScore] | None,
    ) -> tuple[dict[str, Any], Response]:
        question = query.query_str if isinstance(query, QueryBundle) else query
        if not isinstance(question, str) or not question.strip():
            raise InvalidInputError("query", "must be a non-empty string or QueryBundle",
                                    "pass the user's question")
        if isinstance(rag, str):
            rag_response = Response(response=rag, source_nodes=list(source_nodes or []))
        else:
            rag_response = _as_response(rag, "rag")
            if source_nodes is not None:
                rag_response = Response(rag_response.response, list(source_nodes),
                                        rag_response.metadata)
        nodes = rag_response.source_nodes
        if not nodes:
            raise InvalidInputError("rag.source_nodes", "is empty (no passage was retrieved)",
                                    "pass the RAG response with its source nodes, or "
                                    "source_nodes=...; without evidence there is nothing to "
                                    "arbitrate")
        for i, node in enumerate(nodes):
            if not isinstance(node, NodeWithScore):
                raise InvalidInputError(f"rag.source_nodes[{i}]",
                                        f"must be a NodeWithScore, got {type(node).__name__}",
                                        "pass the nodes a LlamaIndex retriever returns")
        if rag_response.metadata and METADATA_KEY in rag_response.metadata:
            raise InvalidInputError(f"rag.metadata[{METADATA_KEY!r}]", "is already set",
                                    "pass the inner engine's response, not one TrustMargin "
                                    "has already arbitrated")
        passages = [node_to_passage(n) for n in nodes]
        for i, text in enumerate(passages):
            if not text.strip():
                raise InvalidInputError(f"rag.source_nodes[{i}]", "has no text",
                                        "drop empty nodes (e.g. with a node postprocessor)")
        item = {"question": question, "passages": passages,
                "direct_answer": self._answer(direct, "direct"),
                "rag_answer": self._answer(rag_response, "rag")}
        return item, rag_response

    def _arbitrate(self, item: dict[str, Any]) -> Decision:
        return self.tm.arbitrate_batch([item], include_prompts=self.include_prompts)[0]

    @staticmethod
    def _result(decision: Decision, rag: Response) -> Response:
        metadata = dict(rag.metadata or {})
        metadata[METADATA_KEY] = decision
        return Response(response=decision.answer, source_nodes=list(rag.source_nodes),
                        metadata=metadata)

    def postprocess(
        self,
        query: str | QueryBundle,
        direct: Response | str | None,
        rag: Response | str,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
    ) -> Response:
        """Arbitrate and return the chosen answer as a ``Response``.

        Args:
            query: the user's question.
            direct: the closed-book answer (Response or text); None lets the scorer model
                generate it with the paper's question-only prompt.
            rag: the retrieved-context answer; a Response carries its source nodes, a string
                needs ``source_nodes``.
            source_nodes: the evidence, when not taken from ``rag``.
        """
        item, rag_response = self._prepare(query, direct, rag, source_nodes)
        return self._result(self._arbitrate(item), rag_response)

    async def apostprocess(
        self,
        query: str | QueryBundle,
        direct: Response | str | None,
        rag: Response | str,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
    ) -> Response:
        """Async :meth:`postprocess`: scoring runs in a worker thread."""
        item, rag_response = self._prepare(query, direct, rag, source_nodes)
        decision = await asyncio.to_thread(self._arbitrate, item)
        return self._result(decision, rag_response)


class TrustMarginQueryEngine(BaseQueryEngine):
    """A drop-in wrapper around any query engine that arbitrates its answer.

    For each query it runs the inner engine (the RAG answer and its source nodes), asks
    ``llm`` closed-book for the Direct answer (with the paper's question-only prompt), and
    returns the :class:`TrustMarginPostprocessor`'s ``Response``. Without ``llm`` the scorer
    model generates the Direct answer itself, inside the same model call that scores.

    Args:
        query_engine: the existing engine (e.g. ``index.as_query_engine(llm=...)``).
        tm: the arbiter.
        llm: the LLM for the closed-book answer; None lets the scorer model answer.
        closed_book_template: a ``{question}`` template for the closed-book prompt.
        clean_answers: see :class:`TrustMarginPostprocessor`.
        callback_manager: defaults to the inner engine's.
    """

    def __init__(
        self,
        query_engine: BaseQueryEngine,
        tm: TrustMargin,
        llm: LLM | None = None,
        *,
        closed_book_template: str = QUESTION_ONLY_TEMPLATE,
        clean_answers: bool = True,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(query_engine, BaseQueryEngine):
            raise InvalidInputError("query_engine", f"is a {type(query_engine).__name__}",
                                    "pass a LlamaIndex query engine, e.g. "
                                    "index.as_query_engine()")
        if "{question}" not in closed_book_template:
            raise InvalidInputError("closed_book_template", "has no {question} placeholder",
                                    "include {question} where the question goes")
        self.query_engine = query_engine
        self.llm = llm
        self.closed_book_template = closed_book_template
        self.postprocessor = TrustMarginPostprocessor(tm, clean_answers=clean_answers)
        super().__init__(callback_manager or getattr(query_engine, "callback_manager", None))

    @property
    def tm(self) -> TrustMargin:
        """The arbiter."""
        return self.postprocessor.tm

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"query_engine": self.query_engine}

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        pass

    def _closed_book_prompt(self, query_bundle: QueryBundle) -> str:
        return self.closed_book_template.format(question=query_bundle.query_str)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        rag = self.query_engine.query(query_bundle)
        direct = (None if self.llm is None
                  else self.llm.complete(self._closed_book_prompt(query_bundle)).text)
        return self.postprocessor.postprocess(query_bundle, direct, _as_response(rag, "rag"))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        rag = await self.query_engine.aquery(query_bundle)
        direct = (None if self.llm is None
                  else (await self.llm.acomplete(self._closed_book_prompt(query_bundle))).text)
        return await self.postprocessor.apostprocess(query_bundle, direct,
                                                     _as_response(rag, "rag"))


class BM25Retriever(BaseRetriever):
    """A LlamaIndex retriever over the embedded :class:`BM25Index`.

    Nodes carry the passage id as ``node_id``, the BM25 score as ``score`` and the title in
    ``metadata["title"]`` (the only metadata the LLM sees, as LlamaIndex prints it).
    """

    def __init__(self, index: BM25Index, similarity_top_k: int = 4,
                 callback_manager: CallbackManager | None = None) -> None:
        if similarity_top_k < 1:
            raise InvalidInputError("similarity_top_k", f"must be >= 1, got {similarity_top_k}",
                                    "ask for at least one node")
        self.index = index
        self.similarity_top_k = similarity_top_k
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = []
        for p in self.index.search(query_bundle.query_str, self.similarity_top_k):
            metadata = {**p.metadata, "title": p.title}
            hidden = [k for k in metadata if k != "title"]
            node = TextNode(id_=p.id, text=p.text, metadata=metadata,
                            excluded_llm_metadata_keys=hidden,
                            excluded_embed_metadata_keys=hidden)
            nodes.append(NodeWithScore(node=node, score=p.score))
        return nodes


class LocalLLM(CustomLLM):
    """A LlamaIndex LLM on a local TrustMargin backend (greedy, chat template applied).

    The prompt is sent as one user message through the backend's chat template, so a
    query engine built on it answers with the same model the arbiter scores with.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(20, ge=1, le=512, description="Greedy generation length.")
    context_window: int = Field(2048, ge=16, description="Prompt budget LlamaIndex packs to.")

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> LocalLLM:
        """Share the arbiter's model (no second copy in memory)."""
        kwargs.setdefault("max_new_tokens", tm.config.max_new_tokens)
        kwargs.setdefault("context_window", tm.config.max_context_tokens)
        return cls(backend=tm.backend, **kwargs)

    @property
    def metadata(self) -> LLMMetadata:
        """Sizes LlamaIndex uses to pack context into prompts."""
        return LLMMetadata(context_window=self.context_window, num_output=self.max_new_tokens,
                           model_name=getattr(self.backend, "model_id", "unknown"),
                           is_chat_model=False)

    def _generate(self, prompt: str) -> str:
        backend: Backend = self.backend
        return backend.generate([backend.render_prompt(prompt)], self.max_new_tokens)[0]

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        """Greedy completion of ``prompt`` (sent as one chat user message)."""
        return CompletionResponse(text=self._generate(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        """One chunk: the whole completion (the backend has no token streaming)."""
        text = self._generate(prompt)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()
