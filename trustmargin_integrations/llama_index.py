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
from collections.abc import AsyncGenerator, Sequence
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
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.llms import LLM, CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
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
    "METADATA_KEY",
    "LocalLLM",
    "PassageRetriever",
    "TrustMarginArbiter",
    "TrustMarginDecisionEvent",
    "TrustMarginQueryEngine",
    "TrustMarginRetrieverQueryEngine",
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
                "direct_answer": direct, "rag_answer": rag_response.response}
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

        Raises:
            InvalidInputError: naming the argument (``query``, ``direct``, ``rag``,
                ``rag.source_nodes[2]``...) and the fix.
        """
        item, rag_response = self._prepare(query, _resolve(direct, "direct"),
                                           _resolve(rag, "rag"), source_nodes)
        return self._result(self._decide(item), rag_response)

    @dispatcher.span
    async def aarbitrate(
        self,
        query: str | QueryBundle,
        direct: RESPONSE_TYPE | str | None,
        rag: RESPONSE_TYPE | str | None,
        *,
        source_nodes: Sequence[NodeWithScore] | None = None,
    ) -> Response:
        """Async :meth:`arbitrate` (also takes ``AsyncStreamingResponse``); scoring runs in a
        worker thread so the event loop stays free."""
        item, rag_response = self._prepare(query, await _aresolve(direct, "direct"),
                                           await _aresolve(rag, "rag"), source_nodes)
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

    Args:
        query_engine: the existing engine (e.g. ``index.as_query_engine(llm=...)``).
        tm: the arbiter.
        llm: the LLM for the closed-book answer; None lets the scorer model answer.
        closed_book_prompt: a ``{question}`` template (string or ``PromptTemplate``) for
            ``llm``; the paper's question-only prompt by default.
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        callback_manager: defaults to the inner engine's.
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

    async def _ainner(self, query_bundle: QueryBundle) -> tuple[Any, Any]:
        """The inner engine's raw response and its text, streamed to the end."""
        raw = await self.query_engine.aquery(query_bundle)
        return raw, await _aresolve(raw, "query_engine.aquery()")

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        raw = self.query_engine.query(query_bundle)
        rag = _resolve(raw, "query_engine.query()")
        direct = self._closed_book(query_bundle)
        return _like(raw, self.arbiter.arbitrate(query_bundle, direct, rag))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        (raw, rag), direct = await asyncio.gather(self._ainner(query_bundle),
                                                  self._aclosed_book(query_bundle))
        return _like(raw, await self.arbiter.aarbitrate(query_bundle, direct, rag))


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
