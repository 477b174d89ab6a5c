"""LlamaIndex adapter: a query-engine wrapper, a retrieval-to-decision engine, a response-level
arbiter, a retriever over any project retriever, and a local LLM.

- :class:`TrustMarginQueryEngine` wraps any query engine: the inner engine gives the RAG answer
  and its source nodes, an LLM answers closed-book, the core arbitrates.
- :class:`TrustMarginRetrieverQueryEngine` is the core's own pipeline (``tm.answer``) behind a
  query engine: retrieve, let the scorer model answer both ways, arbitrate.
- :class:`TrustMarginArbiter` arbitrates two answers you already have.
- :class:`PassageRetriever` turns any project retriever (``BM25Index``,
  ``ElasticsearchRetriever``, anything with ``search(query, k)``) into a LlamaIndex retriever.
- :class:`LocalLLM` is a LlamaIndex LLM on a project backend.
- :class:`PipelineQueryEngine` runs a project pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as
  a query engine, and :func:`build_flare_engine` sets LlamaIndex's
  ``FLAREInstructQueryEngine`` up for a small local model; ``TrustMarginQueryEngine``'s
  ``evidence`` option scores such multi-step answers against the question's own passages.

There is deliberately no node postprocessor: LlamaIndex node postprocessors run before
synthesis and never see an answer, while TrustMargin decides between two *answers*.

Every decision is the core's (:class:`~trustmargin_integrations.arbiter.TrustMargin`):
validation, answer cleaning, context budgeting and scoring are not re-implemented here. Each one
is returned under ``Response.metadata["trustmargin"]`` and dispatched as a
:class:`TrustMarginDecisionEvent` on LlamaIndex's instrumentation bus.

The scorer is the arbiter's own local model. When the inner engine answers with another LLM,
the margins say how the scorer model judges those answers (does its memory accept the RAG
answer, do the passages bind it to the question), not how the generating LLM would; the
paper's ``tau = -1.5`` is calibrated for same-model candidates, so re-check it on your data.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import threading
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    PydanticResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMPredictEndEvent, LLMPredictStartEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.query_engine import FLAREInstructQueryEngine
from llama_index.core.query_engine.flare.answer_inserter import DirectLookaheadAnswerInserter
from llama_index.core.query_engine.flare.output_parser import (
    IsDoneOutputParser,
    QueryTaskOutputParser,
)
from llama_index.core.query_engine.flare.schema import QueryTask
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import PreparedQuestion, TrustMargin
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import QUESTION_ONLY_TEMPLATE
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import Decision, Passage

__all__ = [
    "CLOSED_BOOK_PROMPT_KEY",
    "EVIDENCE_MODES",
    "METADATA_KEY",
    "PIPELINE_METADATA_KEY",
    "LocalLLM",
    "PassageRetriever",
    "PipelineQueryEngine",
    "SearchOrDoneOutputParser",
    "SearchTagOutputParser",
    "TrustMarginArbiter",
    "TrustMarginDecisionEvent",
    "TrustMarginQueryEngine",
    "TrustMarginRetrieverQueryEngine",
    "build_flare_engine",
    "node_to_passage",
    "passage_to_node",
]

dispatcher = instrument.get_dispatcher(__name__)

METADATA_KEY = "trustmargin"
"""The one key of ``Response.metadata`` this adapter writes: the :class:`Decision`."""

CLOSED_BOOK_PROMPT_KEY = "closed_book_prompt"
"""The key of the closed-book prompt in ``TrustMarginQueryEngine.get_prompts()``."""


class TrustMarginDecisionEvent(BaseEvent):
    """Instrumentation event dispatched once per arbitration, carrying the core Decision.

    Register a ``BaseEventHandler`` on ``llama_index.core.instrumentation.get_dispatcher()``
    to log or monitor decisions (source, margins, warnings) without touching responses.
    """

    decision: Decision

    @classmethod
    def class_name(cls) -> str:
        """Event name, as LlamaIndex handlers see it."""
        return "TrustMarginDecisionEvent"


def node_to_passage(node: NodeWithScore) -> Passage:
    """The core :class:`Passage` for a node: its id, text, ``title`` metadata and score.

    Only the text and the title enter the prompt (through ``Passage.as_context()``); other
    node metadata (file paths, page numbers) would only add noise for the scorer.
    """
    title = node.node.metadata.get("title")
    return Passage(id=node.node.node_id,
                   text=node.node.get_content(metadata_mode=MetadataMode.NONE),
                   title=title.strip() if isinstance(title, str) else "",
                   score=node.score)


def passage_to_node(passage: Passage) -> NodeWithScore:
    """A scored node for a project :class:`Passage` (the inverse of :func:`node_to_passage`).

    The node id is the passage id and ``metadata["title"]`` the title; the passage's other
    metadata is kept on the node but hidden from the LLM and the embedder, so a synthesizer
    prompts with ``title: ...`` and the text, as the core does.
    """
    metadata: dict[str, Any] = {**passage.metadata, "title": passage.title}
    hidden = [key for key in metadata if key != "title"]
    node = TextNode(id_=passage.id, text=passage.text, metadata=metadata,
                    excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=hidden)
    return NodeWithScore(node=node, score=passage.score)


# -- responses ---------------------------------------------------------------------------------


def _resolve(value: Any, field: str) -> Any:
    """A streamed or structured response as a plain ``Response`` (other values unchanged)."""
    if isinstance(value, (StreamingResponse, PydanticResponse)):
        return value.get_response()
    if isinstance(value, AsyncStreamingResponse):
        raise InvalidInputError(field, "is an AsyncStreamingResponse",
                                "use the async method (aarbitrate)")
    return value


async def _aresolve(value: Any, field: str) -> Any:
    """:func:`_resolve`, consuming an ``AsyncStreamingResponse`` too."""
    if isinstance(value, AsyncStreamingResponse):
        return await value.get_response()
    return _resolve(value, field)


async def _once(text: str) -> AsyncGenerator[str, None]:
    yield text


def _like(inner: Any, result: Response) -> RESPONSE_TYPE:
    """``result`` in the inner engine's response type, so a streaming caller keeps working.

    Arbitration needs both complete answers, so the chosen answer arrives as one chunk.
    """
    if isinstance(inner, StreamingResponse):
        return StreamingResponse(response_gen=iter([result.response or ""]),
                                 source_nodes=result.source_nodes, metadata=result.metadata,
                                 response_txt=result.response)
    if isinstance(inner, AsyncStreamingResponse):
        return AsyncStreamingResponse(response_gen=_once(result.response or ""),
                                      source_nodes=result.source_nodes,
                                      metadata=result.metadata, response_txt=result.response)
    return result


# -- the response-level arbiter ----------------------------------------------------------------


class TrustMarginArbiter:
    """Arbitrates two answers you already have: (query, closed-book, RAG) -> ``Response``.

    Named an *arbiter*, not a postprocessor, because it is not a LlamaIndex node postprocessor
    and cannot be one: node postprocessors run before the answer exists, and this class
    decides between answers. Putting it in ``node_postprocessors=[...]`` fails when the engine
    is built (see ``callback_manager``). To arbitrate inside an engine, wrap the engine with
    :class:`TrustMarginQueryEngine`.

    The returned ``Response`` holds the chosen text, the RAG answer's source nodes (kept
    whichever answer wins: they are the evidence that was weighed) and the RAG response's
    metadata plus one reserved key, ``metadata["trustmargin"]``: the core
    :class:`~trustmargin_integrations.schema.Decision`. Without source nodes the closed-book
    answer is returned (``reason="no_evidence"``). Answers are passed raw; the core cleans
    them (``TrustMarginConfig.clean_answers``) and records the originals in the Decision.

    Args:
        tm: the arbiter; its backend is the scorer model.
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
    """

    def __init__(self, tm: TrustMargin, *, include_prompts: bool | None = None) -> None:
        self.tm = tm
        self.include_prompts = include_prompts

    def _refuse_node_postprocessor_role(self, _value: Any) -> None:
        raise InvalidInputError(
            "node_postprocessors", "contains a TrustMarginArbiter, which arbitrates answers, "
            "not nodes (node postprocessors run before any answer exists)",
            "wrap the engine instead: TrustMarginQueryEngine(query_engine, tm)")

    # LlamaIndex engines assign ``callback_manager`` to every node postprocessor when they are
    # built; refusing it turns a misplaced arbiter into a clear error at build time instead of
    # an AttributeError at the first query.
    callback_manager = property(fset=_refuse_node_postprocessor_role,
                                doc="Not settable: this is not a node postprocessor.")

    def _prepare(
        self,
        query: str | QueryBundle,
        direct: Any,
        rag: Any,
        source_nodes: Sequence[NodeWithScore] | None,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[PreparedQuestion, Response]:
        """The core's prepared question (validated under LlamaIndex's argument names) and the
        RAG response it came from."""
        if isinstance(rag, Response):
            rag_response = rag
        elif rag is None or isinstance(rag, str):
            rag_response = Response(response=rag)
        else:
            raise InvalidInputError("rag", f"must be a Response or a string, got "
                                    f"{type(rag).__name__}",
                                    "pass the query engine's Response (or its text)")
        if source_nodes is not None:
            rag_response = Response(rag_response.response, list(source_nodes),
                                    rag_response.metadata)
        nodes_field = "rag.source_nodes" if source_nodes is None else "source_nodes"
        for i, node in enumerate(rag_response.source_nodes):
            if not isinstance(node, NodeWithScore):
                raise InvalidInputError(f"{nodes_field}[{i}]",
                                        f"must be a NodeWithScore, got {type(node).__name__}",
                                        "pass the nodes a LlamaIndex retriever returns")
        if rag_response.metadata and METADATA_KEY in rag_response.metadata:
            raise InvalidInputError(f"rag.metadata[{METADATA_KEY!r}]", "is already set",
                                    "pass the inner engine's response, not one TrustMargin "
                                    "has already arbitrated")
        if isinstance(direct, Response):
            direct = direct.response or ""
        item = {"question": query.query_str if isinstance(query, QueryBundle) else query,
                "passages": [node_to_passage(n) for n in rag_response.source_nodes],
                "direct_answer": direct, "rag_answer": rag_response.response,
                "metadata": metadata}
        # Prepared once, so that core errors name the LlamaIndex arguments.
        prepared = self.tm.prepare(item, names={"question": "query", "passages": nodes_field,
                                                "direct_answer": "direct", "rag_answer": "rag"})
        return prepared, rag_response

    def _decide(self, prepared: PreparedQuestion) -> Decision:
        return self.tm.arbitrate_batch([prepared], include_prompts=self.include_prompts)[0]

    @staticmethod
    def _result(decision: Decision, rag: Response) -> Response:
        metadata = dict(rag.metadata or {})
        metadata[METADATA_KEY] = decision
        dispatcher.event(TrustMarginDecisionEvent(decision=decision))
        return Response(response=decision.answer, source_nodes=list(rag.source_nodes),
                        metadata=metadata)

    @dispatcher.span
    def arbitrate(
        self,
        query: str | QueryBundle,
        direct: Response | StreamingResponse | str | None,
        rag: Response | StreamingResponse | PydanticResponse | str | None,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Response:
        """Arbitrate and return the chosen answer as a ``Response``.

        Args:
            query: the user's question.
            direct: the closed-book answer (a response or its text); None lets the scorer
                model generate it with the paper's question-only prompt.
            rag: the retrieved-context answer; a response carries its source nodes, a string
                takes them from ``source_nodes``; None lets the scorer model generate it.
            source_nodes: the evidence, when not taken from ``rag`` (empty: no evidence, the
                closed-book answer is kept).
            metadata: JSON data copied to the Decision's ``metadata`` (the audit record),
                e.g. what the inner engine did.

        Raises:
            InvalidInputError: naming the argument (``query``, ``direct``, ``rag``,
                ``rag.source_nodes[2]``...) and the fix.
        """
        item, rag_response = self._prepare(query, _resolve(direct, "direct"),
                                           _resolve(rag, "rag"), source_nodes, metadata)
        return self._result(self._decide(item), rag_response)

    @dispatcher.span
    async def aarbitrate(
        self,
        query: str | QueryBundle,
        direct: RESPONSE_TYPE | str | None,
        rag: RESPONSE_TYPE | str | None,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Response:
        """Async :meth:`arbitrate` (also takes ``AsyncStreamingResponse``); scoring runs in a
        worker thread so the event loop stays free."""
        item, rag_response = self._prepare(query, await _aresolve(direct, "direct"),
                                           await _aresolve(rag, "rag"), source_nodes, metadata)
        decision = await asyncio.to_thread(self._decide, item)
        return self._result(decision, rag_response)


# -- the query-engine wrapper ------------------------------------------------------------------


def _as_prompt(value: Any, field: str) -> BasePromptTemplate:
    """A closed-book prompt whose one open variable is ``{question}``."""
    prompt = PromptTemplate(value) if isinstance(value, str) else value
    if not isinstance(prompt, BasePromptTemplate):
        raise InvalidInputError(field, f"must be a string or a prompt template, got "
                                f"{type(value).__name__}",
                                "pass e.g. PromptTemplate('Question: {question}\\nAnswer:')")
    open_vars = set(prompt.template_vars) - set(prompt.kwargs)
    if open_vars != {"question"}:
        raise InvalidInputError(field, f"has the variables {sorted(open_vars)}",
                                "use exactly one placeholder, {question}")
    return prompt


class TrustMarginQueryEngine(BaseQueryEngine):
    """A drop-in wrapper around any query engine that arbitrates its answer.

    For each query it runs the inner engine (the RAG answer and its source nodes) and asks
    ``llm`` closed-book for the Direct answer (``aquery`` runs both concurrently), then returns
    the :class:`TrustMarginArbiter`'s result: the chosen text, the inner engine's source nodes
    and metadata, and ``metadata["trustmargin"]``, the core Decision. Without ``llm`` the scorer
    model generates the Direct answer itself, inside the same model call that scores.

    - A streaming inner engine is consumed (arbitration needs the whole answer); the result is
      then a ``StreamingResponse`` / ``AsyncStreamingResponse`` yielding the chosen answer as
      one chunk, so streaming callers keep working.
    - When the inner engine returns no source nodes (retrieval found nothing), the closed-book
      answer is returned with ``reason="no_evidence"`` instead of an error, so routers,
      sub-question engines and agents using this engine as a tool keep going.
    - The closed-book prompt is a LlamaIndex prompt (``get_prompts()["closed_book_prompt"]``,
      changeable with ``update_prompts``) when ``llm`` is given; the inner engine's prompts
      appear under ``query_engine:...``.

    Multi-step engines (LlamaIndex's ``FLAREInstructQueryEngine``, a
    :class:`PipelineQueryEngine` over IRCoT...) answer from passages they gathered along the
    way, and may return none at all (FLARE returns only the nodes of its own sub-queries). The
    ``evidence`` option says what the answer is scored against:

    - ``"response"`` (default): the inner response's source nodes; none means
      ``no_evidence``, the closed-book answer.
    - ``"retriever"``: the question's top-``k`` nodes from ``retriever`` (or, when it is
      None, from the inner engine's own ``retrieve()``, which FLARE and
      ``RetrieverQueryEngine`` provide), as in the paper: every RAG-side answer is judged on
      the passages BM25-RAG would use. The response then carries these nodes.
    - ``"response_or_retriever"``: the inner response's nodes, the retriever's when it has
      none.

    With ``evidence`` other than ``"response"`` or ``trace=True`` the Decision's
    ``metadata["query_engine"]`` records what the inner engine did: its class, its raw
    answer, its own source nodes (id, title, score), which evidence was scored and, with
    ``trace=True``, the LlamaIndex instrumentation events of the inner query in order
    (every ``llm.predict`` with its template arguments and output, e.g. FLARE's look-ahead
    sentences; every retrieval and sub-query with its nodes; strings over 500 characters
    are cut and say so). Over a :class:`PipelineQueryEngine`, ``metadata["pipeline"]`` is
    the pipeline's trace.

    Args:
        query_engine: the existing engine (e.g. ``index.as_query_engine(llm=...)``).
        tm: the arbiter.
        llm: the LLM for the closed-book answer; None lets the scorer model answer.
        closed_book_prompt: a ``{question}`` template (string or ``PromptTemplate``) for
            ``llm``; the paper's question-only prompt by default.
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        callback_manager: defaults to the inner engine's.
        evidence: ``"response"``, ``"retriever"`` or ``"response_or_retriever"`` (above).
        retriever: the evidence retriever for the last two: a LlamaIndex retriever or a
            project retriever (wrapped in a :class:`PassageRetriever` of ``k`` nodes).
        k: at most this many evidence nodes from the retriever (default: all a LlamaIndex
            retriever returns; ``tm.config.top_k`` for a project retriever).
        trace: record the inner engine's instrumentation events in the Decision.
    """

    def __init__(
        self,
        query_engine: BaseQueryEngine,
        tm: TrustMargin,
        llm: LLM | None = None,
        *,
        closed_book_prompt: str | BasePromptTemplate | None = None,
        include_prompts: bool | None = None,
        callback_manager: CallbackManager | None = None,
        evidence: str = "response",
        retriever: BaseRetriever | Retriever | None = None,
        k: int | None = None,
        trace: bool = False,
    ) -> None:
        if not isinstance(query_engine, BaseQueryEngine):
            raise InvalidInputError("query_engine", f"is a {type(query_engine).__name__}",
                                    "pass a LlamaIndex query engine, e.g. "
                                    "index.as_query_engine()")
        if llm is None and closed_book_prompt is not None:
            raise InvalidInputError("closed_book_prompt", "is only used with llm=...",
                                    "pass the LLM to ask closed-book, or drop the prompt (the "
                                    "scorer model answers with the paper's prompt)")
        self.query_engine = query_engine
        self.llm = llm
        self.closed_book_prompt = _as_prompt(closed_book_prompt or QUESTION_ONLY_TEMPLATE,
                                             "closed_book_prompt")
        self.arbiter = TrustMarginArbiter(tm, include_prompts=include_prompts)
        self.evidence, self.retriever, self.k = _evidence_source(evidence, retriever, k, tm)
        self.trace = bool(trace)
        if self.trace:
            _install_trace_collector()
        super().__init__(callback_manager or getattr(query_engine, "callback_manager", None))

    @property
    def tm(self) -> TrustMargin:
        """The arbiter."""
        return self.arbiter.tm

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"query_engine": self.query_engine}

    def _get_prompts(self) -> PromptDictType:
        # Without an LLM the scorer answers with the core's fixed prompt: nothing to change.
        return {} if self.llm is None else {CLOSED_BOOK_PROMPT_KEY: self.closed_book_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if CLOSED_BOOK_PROMPT_KEY not in prompts:
            return
        if self.llm is None:
            raise InvalidInputError(CLOSED_BOOK_PROMPT_KEY, "is only used with llm=...",
                                    "build the engine with the LLM to ask closed-book")
        self.closed_book_prompt = _as_prompt(prompts[CLOSED_BOOK_PROMPT_KEY],
                                             CLOSED_BOOK_PROMPT_KEY)

    def _closed_book(self, query_bundle: QueryBundle) -> str | None:
        if self.llm is None:
            return None
        return self.llm.predict(self.closed_book_prompt, question=query_bundle.query_str)

    async def _aclosed_book(self, query_bundle: QueryBundle) -> str | None:
        if self.llm is None:
            return None
        return await self.llm.apredict(self.closed_book_prompt,
                                       question=query_bundle.query_str)

    async def _ainner(self, query_bundle: QueryBundle
                      ) -> tuple[Any, Any, list[dict[str, Any]] | None]:
        """The inner engine's raw response, its text streamed to the end, and its trace."""
        # Set inside this task, whose context is its own: the concurrent closed-book call
        # is not recorded.
        with _capture(self.trace) as trace:
            raw = await self.query_engine.aquery(query_bundle)
            rag = await _aresolve(raw, "query_engine.aquery()")
        return raw, rag, None if trace is None else trace.steps

    def _needs_retrieval(self, rag: Any) -> bool:
        if self.evidence == "response":
            return False
        return self.evidence == "retriever" or not getattr(rag, "source_nodes", None)

    def _retrieved(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        return list(nodes) if self.k is None else list(nodes)[:self.k]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The question's top nodes: from ``retriever``, else from the inner engine."""
        if self.retriever is not None:
            return self._retrieved(self.retriever.retrieve(query_bundle))
        try:
            return self._retrieved(self.query_engine.retrieve(query_bundle))
        except NotImplementedError:
            raise _no_retrieve(self.query_engine) from None

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.retriever is not None:
            return self._retrieved(await self.retriever.aretrieve(query_bundle))
        aretrieve = getattr(self.query_engine, "aretrieve", None)
        try:
            nodes = (await aretrieve(query_bundle) if aretrieve is not None
                     else await asyncio.to_thread(self.query_engine.retrieve, query_bundle))
        except NotImplementedError:
            raise _no_retrieve(self.query_engine) from None
        return self._retrieved(nodes)

    def _record(self, rag: Any, retrieved: bool, trace: list[dict[str, Any]] | None
                ) -> dict[str, Any] | None:
        """What goes into the Decision's metadata about the inner engine (None: nothing)."""
        out: dict[str, Any] = {}
        if self.trace or self.evidence != "response":
            response = rag if isinstance(rag, Response) else None
            inner: dict[str, Any] = {
                "engine": type(self.query_engine).__name__,
                "answer": response.response if response is not None else rag,
                "source_nodes": ([_node_ref(n) for n in response.source_nodes]
                                 if response is not None else []),
                "evidence": "retriever" if retrieved else "response",
            }
            if trace is not None:
                inner["trace"] = trace
            out["query_engine"] = inner
        if isinstance(self.query_engine, PipelineQueryEngine) and isinstance(rag, Response):
            pipeline = (rag.metadata or {}).get(PIPELINE_METADATA_KEY)
            if isinstance(pipeline, Mapping):
                out[PIPELINE_METADATA_KEY] = dict(pipeline)
        return out or None

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with _capture(self.trace) as trace:
            raw = self.query_engine.query(query_bundle)
            rag = _resolve(raw, "query_engine.query()")
        direct = self._closed_book(query_bundle)
        nodes = self._retrieve(query_bundle) if self._needs_retrieval(rag) else None
        metadata = self._record(rag, nodes is not None, None if trace is None else trace.steps)
        return _like(raw, self.arbiter.arbitrate(query_bundle, direct, rag, source_nodes=nodes,
                                                 metadata=metadata))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        (raw, rag, trace), direct = await asyncio.gather(self._ainner(query_bundle),
                                                         self._aclosed_book(query_bundle))
        nodes = await self._aretrieve(query_bundle) if self._needs_retrieval(rag) else None
        metadata = self._record(rag, nodes is not None, trace)
        return _like(raw, await self.arbiter.aarbitrate(query_bundle, direct, rag,
                                                        source_nodes=nodes, metadata=metadata))


# -- the core pipeline as a query engine -------------------------------------------------------


class _Retrieved:
    """The nodes already retrieved for one query, offered to the core as a Retriever."""

    def __init__(self, nodes: Sequence[NodeWithScore]) -> None:
        self.nodes = list(nodes)

    def search(self, query: str, k: int) -> list[Passage]:
        """The passages of the first ``k`` nodes (the query was already answered)."""
        return [node_to_passage(n) for n in self.nodes[:k]]


class TrustMarginRetrieverQueryEngine(BaseQueryEngine):
    """The core pipeline, ``tm.answer``, as a query engine: retrieve, answer, arbitrate.

    The scorer model generates both candidates with the paper's prompts (closed-book and
    with the passages), so the margins are exactly the paper's same-model setting. Use it
    when you have a retriever but no query engine yet; use :class:`TrustMarginQueryEngine` to
    keep an existing engine's answers.

    The ``Response`` holds the chosen answer, the retrieved nodes that entered the context
    and ``metadata["trustmargin"]``; when retrieval finds nothing the closed-book answer is
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
        k: int | None = None,
        *,
        include_prompts: bool | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self.k = tm.config.top_k if k is None else k
        retrieve_batch(_Retrieved([]), [], self.k)  # the core's check of k, before any query
        if not isinstance(retriever, BaseRetriever):
            retriever = PassageRetriever(retriever, similarity_top_k=self.k)
        self.retriever = retriever
        self.tm = tm
        self.include_prompts = include_prompts
        super().__init__(callback_manager or retriever.callback_manager)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _answer(self, query_bundle: QueryBundle, nodes: list[NodeWithScore]) -> Response:
        retrieved = _Retrieved(nodes)
        decision = self.tm.answer(query_bundle.query_str, retrieved, self.k,
                                  include_prompts=self.include_prompts)
        dispatcher.event(TrustMarginDecisionEvent(decision=decision))
        return Response(response=decision.answer,
                        source_nodes=retrieved.nodes[:decision.passages_used],
                        metadata={METADATA_KEY: decision})

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return self._answer(query_bundle, self.retriever.retrieve(query_bundle))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        nodes = await self.retriever.aretrieve(query_bundle)
        return await asyncio.to_thread(self._answer, query_bundle, nodes)


# -- retriever and LLM -------------------------------------------------------------------------


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

    def __init__(self, search: Retriever, similarity_top_k: int = 4,
                 callback_manager: CallbackManager | None = None) -> None:
        # Checked here (not only at the first query) so a wrong argument fails where it is
        # written; the hits themselves are checked by the core's retrieve_batch.
        if not callable(getattr(search, "search", None)):
            raise InvalidInputError("search", f"a {type(search).__name__} has no "
                                    "search(query, k) method",
                                    "pass a BM25Index, an ElasticsearchRetriever or any "
                                    "object with search(query, k) -> list[Passage]")
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int) \
                or similarity_top_k < 1:
            raise InvalidInputError("similarity_top_k", f"must be >= 1, got "
                                    f"{similarity_top_k!r}", "ask for at least one node")
        self.search = search
        self.similarity_top_k = similarity_top_k
        super().__init__(callback_manager=callback_manager)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = retrieve_batch(self.search, [query_bundle.query_str], self.similarity_top_k)[0]
        return [passage_to_node(p) for p in hits]


class LocalLLM(CustomLLM):
    """A LlamaIndex LLM on a local TrustMargin backend (greedy, chat template applied).

    The prompt is sent as one user message through the backend's chat template, so a
    query engine built on it answers with the same model the arbiter scores with. The async
    methods generate in a worker thread, so the event loop (and other coroutines, such as
    the inner engine and the closed-book call of ``TrustMarginQueryEngine.aquery``) keeps
    running; the backend serializes model calls itself.
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

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        """:meth:`complete` in a worker thread."""
        return CompletionResponse(text=await asyncio.to_thread(self._generate, prompt))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        """:meth:`stream_complete` in a worker thread: one chunk, the whole completion."""
        text = await asyncio.to_thread(self._generate, prompt)

        async def gen() -> CompletionResponseAsyncGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()


# -- multi-step engines: evidence, traces, pipelines, FLARE ------------------------------------

EVIDENCE_MODES = ("response", "retriever", "response_or_retriever")
"""What :class:`TrustMarginQueryEngine` scores the inner answer against (its ``evidence``)."""

PIPELINE_METADATA_KEY = "pipeline"
"""The key of a pipeline's trace in :class:`PipelineQueryEngine`'s ``Response.metadata`` and
in the Decision's ``metadata``."""

_TRACE_TEXT_LIMIT = 500


def _evidence_source(evidence: Any, retriever: Any, k: Any, tm: TrustMargin
                     ) -> tuple[str, BaseRetriever | None, int | None]:
    """Check ``TrustMarginQueryEngine``'s evidence options; a project retriever is wrapped."""
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
        retrieve_batch(_Retrieved([]), [], k)  # the core's check of k, before any query
    if retriever is None or isinstance(retriever, BaseRetriever):
        return evidence, retriever, k
    if not callable(getattr(retriever, "search", None)):
        raise InvalidInputError("retriever", f"a {type(retriever).__name__} is neither a "
                                "LlamaIndex retriever nor has a search(query, k) method",
                                "pass a LlamaIndex retriever, a BM25Index or any object with "
                                "search(query, k)")
    return evidence, PassageRetriever(retriever, tm.config.top_k if k is None else k), k


def _no_retrieve(engine: BaseQueryEngine) -> InvalidInputError:
    return InvalidInputError("retriever", f"is needed: a {type(engine).__name__} cannot "
                             "retrieve the question's passages itself",
                             "pass retriever=... (e.g. the PassageRetriever its inner engine "
                             "uses) to TrustMarginQueryEngine")


def _node_ref(node: NodeWithScore) -> dict[str, Any]:
    """What a trace keeps of a node: id, title and score (the text is in the index)."""
    title = node.node.metadata.get("title")
    score = node.score if node.score is None or math.isfinite(node.score) else None
    return {"id": node.node.node_id, "title": title if isinstance(title, str) else "",
            "score": score}


def _short(value: Any) -> Any:
    """A JSON value for a trace: long strings are cut, and say by how much."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    text = value if isinstance(value, str) else str(value)
    if len(text) > _TRACE_TEXT_LIMIT:
        return f"{text[:_TRACE_TEXT_LIMIT]}... [cut: {len(text)} characters]"
    return text


def _query_text(value: Any) -> str:
    return value.query_str if isinstance(value, QueryBundle) else str(value)


def _response_text(value: Any) -> Any:
    if isinstance(value, Response):
        return value.response
    if isinstance(value, (StreamingResponse, AsyncStreamingResponse)):
        return value.response_txt
    return str(value)


@dataclass
class _Trace:
    """The steps of one inner query, from LlamaIndex's instrumentation events."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, event: BaseEvent) -> None:
        if isinstance(event, LLMPredictStartEvent):
            # Paired with its end event by span: concurrent predicts do not mix.
            args = event.template_args or {}
            self.pending[str(event.span_id)] = {str(key): _short(value)
                                                for key, value in args.items()}
        elif isinstance(event, LLMPredictEndEvent):
            self.steps.append({"event": "llm_predict",
                               "args": self.pending.pop(str(event.span_id), {}),
                               "output": event.output})
        elif isinstance(event, RetrievalEndEvent):
            self.steps.append({"event": "retrieve",
                               "query": _short(_query_text(event.str_or_query_bundle)),
                               "nodes": [_node_ref(n) for n in event.nodes]})
        elif isinstance(event, QueryEndEvent):
            response = event.response
            self.steps.append({"event": "query", "query": _short(_query_text(event.query)),
                               "answer": _short(_response_text(response)),
                               "source_nodes": [_node_ref(n) for n in
                                                getattr(response, "source_nodes", None) or []]})


_ACTIVE_TRACE: ContextVar[_Trace | None] = ContextVar("trustmargin_llama_trace", default=None)


class _TraceCollector(BaseEventHandler):
    """Root event handler that hands events to the trace of the current context, if any.

    It is installed once, the first time an engine asks for traces, and does nothing outside
    a :func:`_capture` block (one context variable lookup per event).
    """

    @classmethod
    def class_name(cls) -> str:
        """Handler name, as LlamaIndex lists it."""
        return "TrustMarginTraceCollector"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        """Record ``event`` in the active trace."""
        trace = _ACTIVE_TRACE.get()
        if trace is not None:
            trace.add(event)


_COLLECTOR_LOCK = threading.Lock()
_COLLECTOR: list[_TraceCollector] = []


def _install_trace_collector() -> None:
    with _COLLECTOR_LOCK:
        if not _COLLECTOR:
            _COLLECTOR.append(_TraceCollector())
            instrument.get_dispatcher().add_event_handler(_COLLECTOR[0])


@contextlib.contextmanager
def _capture(on: bool) -> Iterator[_Trace | None]:
    """Record the instrumentation events of the block (in this context) when ``on``."""
    if not on:
        yield None
        return
    trace = _Trace()
    token = _ACTIVE_TRACE.set(trace)
    try:
        yield trace
    finally:
        _ACTIVE_TRACE.reset(token)


class PipelineQueryEngine(BaseQueryEngine):
    """A project pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as a LlamaIndex query engine.

    The ``Response`` holds the pipeline's answer, the passages it was conditioned on as
    source nodes (:func:`passage_to_node`) and its whole trace under
    ``metadata["pipeline"]`` (``PipelineResult.to_metadata()``). Wrapped in
    :class:`TrustMarginQueryEngine`, the pipeline's answer is the RAG-side candidate and its
    trace lands in the Decision's ``metadata["pipeline"]``; pass
    ``evidence="retriever", retriever=index`` there to score it against the question's
    top-k passages, as the paper does, rather than against the passages it gathered.

    Args:
        pipeline: e.g. ``build_pipeline("ircot", tm.backend, index, k=3)``.
        callback_manager: LlamaIndex callbacks.
    """

    def __init__(self, pipeline: Any, callback_manager: CallbackManager | None = None) -> None:
        if not (isinstance(getattr(pipeline, "name", None), str)
                and callable(getattr(pipeline, "run", None))):
            raise InvalidInputError("pipeline", f"a {type(pipeline).__name__} is not a "
                                    "pipeline (it needs name and run(question))",
                                    "pass a pipeline from trustmargin_integrations.pipelines, "
                                    "e.g. build_pipeline('ircot', tm.backend, index, k=3)")
        self.pipeline = pipeline
        super().__init__(callback_manager)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        question = query_bundle.query_str
        if not isinstance(question, str) or not question.strip():
            raise InvalidInputError("query", "is empty or whitespace",
                                    "pass the user's question as text")
        result = self.pipeline.run(question)
        return Response(response=result.answer,
                        source_nodes=[passage_to_node(p) for p in result.passages],
                        metadata={PIPELINE_METADATA_KEY: result.to_metadata()})

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return await asyncio.to_thread(self._query, query_bundle)


_SEARCH_TAG = re.compile(r"\[Search\((.*?)\)\]", re.DOTALL)
_DONE = re.compile(r"\bdone\b", re.IGNORECASE)


class SearchTagOutputParser(QueryTaskOutputParser):
    """FLARE's query-task parser, reading only well-formed ``[Search(query)]`` tags.

    The stock parser treats every ``[``...``]`` pair as a tag and raises (``IndexError``,
    ``UnboundLocalError``) on a bracket without ``(``, or on a ``]`` before any ``[``; a
    small model writes such brackets (SmolLM2-135M answered ``... the [Zelvora Bridge
    Design] company``), which aborts the query. Other brackets are text here.
    """

    def parse(self, output: str) -> list[QueryTask]:
        """The search tasks of ``output`` (tag start, and end index of its ``]``)."""
        return [QueryTask(match.group(1).strip(), match.start(), match.end() - 1)
                for match in _SEARCH_TAG.finditer(output) if match.group(1).strip()]


class SearchOrDoneOutputParser(IsDoneOutputParser):
    """FLARE's "is the answer done?" check, for short answers from a small model.

    A look-ahead with a ``[Search(...)]`` tag is never done (the tag is searched first).
    Otherwise it is done when it holds the word ``done`` (removed from the answer) or, with
    ``stop_without_search`` (the default), when it is a sentence that asked for no search:
    for a short-answer question that sentence is the answer. The stock parser matches the
    substring "done" anywhere ("Donetsk", "abandoned") and ignores its ``is_done_fn``; a
    small model never writes "done", so the stock loop runs to ``max_iterations`` and
    appends a near copy of the sentence each time.
    """

    def __init__(self, stop_without_search: bool = True) -> None:
        super().__init__()
        self.stop_without_search = stop_without_search

    def parse(self, output: str) -> tuple[bool, str]:
        """``(done, answer text)`` for one look-ahead."""
        if _SEARCH_TAG.search(output):
            return False, output
        if _DONE.search(output):
            return True, " ".join(_DONE.sub(" ", output).split())
        return (True, output.strip()) if self.stop_without_search else (False, output)


def build_flare_engine(
    query_engine: BaseQueryEngine,
    llm: LLM,
    *,
    max_iterations: int = 3,
    stop_without_search: bool = True,
    **kwargs: Any,
) -> FLAREInstructQueryEngine:
    """LlamaIndex's ``FLAREInstructQueryEngine`` set up to run on a small local model.

    Three parts are swapped (each can still be passed in ``kwargs``), nothing else:

    - ``query_task_output_parser``: :class:`SearchTagOutputParser` (stray brackets no longer
      raise);
    - ``done_output_parser``: :class:`SearchOrDoneOutputParser` (the word "done", or a
      sentence without a search, ends the answer);
    - ``lookahead_answer_inserter``: LlamaIndex's own ``DirectLookaheadAnswerInserter``,
      which puts the sub-query's answer in place of its tag. The default LLM inserter asks
      the model to rewrite the sentence with a long instruction; SmolLM2-135M answered that
      with text about the instruction ("The lookahead template may contain multiple ..."),
      even when there was nothing to insert.

    A small model rarely writes ``[Search(...)]`` tags, so FLARE often answers without
    retrieving and returns no source nodes; wrap the engine with
    ``TrustMarginQueryEngine(..., evidence="retriever")`` to score its answer against the
    question's top-k passages.

    Args:
        query_engine: the engine FLARE sends its search queries to (e.g. a
            ``RetrieverQueryEngine`` over a :class:`PassageRetriever`).
        llm: the LLM that writes the look-ahead sentences (e.g. :class:`LocalLLM`).
        max_iterations: most look-ahead rounds (FLARE's default is 10).
        stop_without_search: see :class:`SearchOrDoneOutputParser`.
        kwargs: other ``FLAREInstructQueryEngine`` arguments.
    """
    kwargs.setdefault("query_task_output_parser", SearchTagOutputParser())
    kwargs.setdefault("done_output_parser", SearchOrDoneOutputParser(stop_without_search))
    kwargs.setdefault("lookahead_answer_inserter", DirectLookaheadAnswerInserter())
    return FLAREInstructQueryEngine(query_engine, llm=llm, max_iterations=max_iterations,
                                    **kwargs)
