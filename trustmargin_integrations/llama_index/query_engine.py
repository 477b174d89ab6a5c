"""The query-engine wrapper: any LlamaIndex query engine, arbitrated."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from trustmargin_integrations.answering import warn_other_model
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.answering import engine_llm, llm_name
from trustmargin_integrations.llama_index.arbiter import METADATA_KEY, TrustMarginArbiter
from trustmargin_integrations.llama_index.nodes import node_ref, node_to_passage
from trustmargin_integrations.llama_index.pipeline_engine import (
    PIPELINE_METADATA_KEY,
    PipelineQueryEngine,
)
from trustmargin_integrations.llama_index.responses import arecord, like, record, response_text
from trustmargin_integrations.llama_index.retrieval import evidence_source, no_retrieve_error
from trustmargin_integrations.llama_index.tracing import capture, install_trace_collector
from trustmargin_integrations.prompts import QUESTION_ONLY_TEMPLATE
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.shadow import Shadow, shadow_record
from trustmargin_integrations.sides import BothAnswers, chosen_side
from trustmargin_integrations.validation import check_question
from trustmargin_integrations.vocabulary import Side

__all__ = ["CLOSED_BOOK_PROMPT_KEY", "QUESTION_VARIABLES", "TrustMarginQueryEngine"]

CLOSED_BOOK_PROMPT_KEY = "closed_book_prompt"
"""The key of the closed-book prompt in ``TrustMarginQueryEngine.get_prompts()``."""


QUESTION_VARIABLES = ("question", "query_str")
"""The placeholders a closed-book prompt may use for the question: ours and LlamaIndex's."""


def _as_prompt(value: Any, field: str) -> BasePromptTemplate:
    """A closed-book prompt whose one open variable is ``{question}`` or ``{query_str}``."""
    prompt = PromptTemplate(value) if isinstance(value, str) else value
    if not isinstance(prompt, BasePromptTemplate):
        raise InvalidInputError(field, f"must be a string or a prompt template, got "
                                f"{type(value).__name__}",
                                "pass e.g. PromptTemplate('Question: {question}\\nAnswer:')")
    open_vars = set(prompt.template_vars) - set(prompt.kwargs)
    if len(open_vars) != 1 or not open_vars <= set(QUESTION_VARIABLES):
        raise InvalidInputError(field, f"has the variables {sorted(open_vars)}",
                                "use exactly one placeholder, {question} or {query_str}")
    return prompt


def _question_variable(prompt: BasePromptTemplate) -> str:
    """The closed-book prompt's question placeholder (checked by :func:`_as_prompt`)."""
    return next(v for v in QUESTION_VARIABLES if v in prompt.template_vars)


class TrustMarginQueryEngine(BaseQueryEngine):
    """A drop-in wrapper around any query engine that arbitrates its answer.

    For each query it runs the inner engine (the RAG answer and its source nodes) and asks
    ``llm`` closed-book for the Direct answer (``aquery`` runs both concurrently), then returns
    the :class:`TrustMarginArbiter`'s result: the chosen answer's full text as the inner engine
    or ``llm`` wrote it, the inner engine's source nodes and metadata, and
    ``metadata["trustmargin"]``, the core Decision (a JSON dict that reads like the Decision;
    its ``answer`` is the chosen full text, and ``direct_answer`` / ``rag_answer`` the parts
    that were compared, where the two texts differ). Without ``llm`` the scorer model
    generates the Direct answer itself, inside the same model call that scores.

    - A blank question, or one too long for ``llm``'s context window, is refused
      (``InvalidInputError`` naming ``query``) before the inner engine or any LLM runs.
    - ``retrieve()`` is the inner engine's, so retrieval-only callers keep working.

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
        closed_book_prompt: a template (string or ``PromptTemplate``) for ``llm`` with one
            placeholder, ``{question}`` or LlamaIndex's ``{query_str}``; the paper's
            question-only prompt by default.
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        callback_manager: defaults to the inner engine's.
        evidence: ``"response"``, ``"retriever"`` or ``"response_or_retriever"`` (above).
        retriever: the evidence retriever for the last two: a LlamaIndex retriever or a
            project retriever (wrapped in a :class:`PassageRetriever` of ``k`` nodes).
        k: at most this many evidence nodes from the retriever (default: all a LlamaIndex
            retriever returns; ``tm.config.top_k`` for a project retriever).
        trace: record the inner engine's instrumentation events in the Decision.
        shadow: shadow mode (a :class:`~trustmargin_integrations.shadow.Shadow`): each query
            runs one side only (the policy's fixed side, else the inner engine) and returns
            it as that side does (a stream as it comes); when the answer is complete the
            rest is queued off the answer path: the other side, the scoring and the decision
            under ``shadow.policy`` (the paper's rule by default), dispatched as a
            :class:`TrustMarginDecisionEvent` and appended to ``shadow.log``.
    """

    def __init__(
        self,
        query_engine: BaseQueryEngine,
        tm: TrustMargin,
        *,
        llm: LLM | None = None,
        closed_book_prompt: str | BasePromptTemplate | None = None,
        include_prompts: bool | None = None,
        callback_manager: CallbackManager | None = None,
        evidence: str = "response",
        retriever: BaseRetriever | Retriever | None = None,
        k: int | None = None,
        trace: bool = False,
        shadow: Shadow | None = None,
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
        self.evidence, self.retriever, self.k = evidence_source(evidence, retriever, k,
                                                                tm.config.top_k)
        self.trace = bool(trace)
        if shadow is not None and not isinstance(shadow, Shadow):
            raise InvalidInputError("shadow", f"a {type(shadow).__name__} is not a Shadow",
                                    "pass Shadow(log=...) or None")
        self.shadow = shadow
        if shadow is not None and self.fixed_side is None and (
                self.arbiter.policy or tm.config.decision_policy).fixed_side == "direct":
            raise InvalidInputError("shadow", "needs llm=... under an always-Direct policy",
                                    "pass the LLM that answers closed-book (the answer path "
                                    "runs it alone)")
        if self.trace:
            install_trace_collector()
        warn_other_model(llm_name(engine_llm(query_engine) or llm), tm.backend.model_id)
        super().__init__(callback_manager or getattr(query_engine, "callback_manager", None))

    @property
    def tm(self) -> TrustMargin:
        """The arbiter."""
        return self.arbiter.tm

    # -- prompts ---------------------------------------------------------------------------

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"query_engine": self.query_engine}

    def _get_prompts(self) -> PromptDictType:
        # Without an LLM the scorer answers with the core's fixed prompt: nothing to change.
        return {} if self.llm is None else {CLOSED_BOOK_PROMPT_KEY: self.closed_book_prompt}

    def update_prompts(self, prompts_dict: PromptDictType) -> None:
        """Update prompts by the keys :meth:`get_prompts` lists, however deeply nested.

        LlamaIndex's own method splits a key at every ``:`` and so refuses the inner engine's
        ``query_engine:response_synthesizer:text_qa_template``; here only the first ``:``
        separates the module, and the rest goes to the inner engine as its own key.
        """
        own: dict[str, BasePromptTemplate] = {}
        inner: dict[str, BasePromptTemplate] = {}
        for key, prompt in prompts_dict.items():
            module, nested, rest = key.partition(":")
            if nested and module == "query_engine":
                inner[rest] = prompt
            else:
                own[key] = prompt
        super().update_prompts(own)
        if inner:
            self.query_engine.update_prompts(inner)

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if CLOSED_BOOK_PROMPT_KEY not in prompts:
            return
        if self.llm is None:
            raise InvalidInputError(CLOSED_BOOK_PROMPT_KEY, "is only used with llm=...",
                                    "build the engine with the LLM to ask closed-book")
        self.closed_book_prompt = _as_prompt(prompts[CLOSED_BOOK_PROMPT_KEY],
                                             CLOSED_BOOK_PROMPT_KEY)

    # -- the question, the two candidates and the evidence ----------------------------------

    def _check_query(self, query_bundle: QueryBundle) -> None:
        """Refuse a blank question, or one the closed-book LLM cannot take, before the inner
        engine or any LLM runs (a 200k-character question would otherwise be prefilled)."""
        question = check_question(query_bundle.query_str, "query")
        if self.llm is None:
            return  # the scorer answers closed-book, inside the core's own window rule
        meta = self.llm.metadata
        room = meta.context_window - meta.num_output
        prompt = self.closed_book_prompt.format(**{
            _question_variable(self.closed_book_prompt): question})
        # Counted with the scorer's tokenizer: the closed-book LLM's own is not known here;
        # LlamaIndex packs prompts to the same metadata without the LLM's tokenizer either.
        used = self.tm.backend.count_tokens(prompt)
        if used > room:
            raise InvalidInputError(
                "query", f"makes a closed-book prompt of about {used} tokens, more than the "
                f"{room} that llm's context window ({meta.context_window}) leaves after "
                f"{meta.num_output} output tokens",
                "put long documents in the index and ask a short question")

    def retrieve(self, query_bundle: QueryBundle | str) -> list[NodeWithScore]:
        """The inner engine's nodes for the query (its own ``retrieve()``); over an inner
        engine that cannot retrieve, the evidence ``retriever``'s."""
        if isinstance(query_bundle, str):
            query_bundle = QueryBundle(query_bundle)
        try:
            return self.query_engine.retrieve(query_bundle)
        except NotImplementedError:
            if self.retriever is None:
                raise
        return self._retrieved(self.retriever.retrieve(query_bundle))

    def _closed_book(self, query_bundle: QueryBundle, streamed: bool
                     ) -> tuple[str | None, list[str] | None]:
        """``llm``'s closed-book answer (None: the scorer generates it), streamed in pieces
        when the inner engine streams, so either side can be streamed again once kept."""
        if self.llm is None:
            return None, None
        question = {_question_variable(self.closed_book_prompt): query_bundle.query_str}
        if not streamed:
            return self.llm.predict(self.closed_book_prompt, **question), None
        pieces = [p for p in self.llm.stream(self.closed_book_prompt, **question) if p]
        return "".join(pieces), pieces

    async def _aclosed_book(self, query_bundle: QueryBundle, streamed: bool
                            ) -> tuple[str | None, list[str] | None]:
        if self.llm is None:
            return None, None
        question = {_question_variable(self.closed_book_prompt): query_bundle.query_str}
        if not streamed:
            return await self.llm.apredict(self.closed_book_prompt, **question), None
        gen = await self.llm.astream(self.closed_book_prompt, **question)
        pieces = [p async for p in gen if p]
        return "".join(pieces), pieces

    def _inner(self, query_bundle: QueryBundle) -> tuple[Any, Any, list[str] | None,
                                                         list[dict[str, Any]] | None]:
        """The inner engine's raw response, its text (a stream consumed, its pieces kept) and
        its trace; run in a context of its own, so the concurrent closed-book call is not
        recorded in the trace."""
        with capture(self.trace) as trace:
            raw = self.query_engine.query(query_bundle)
            rag, pieces = record(raw, "query_engine.query()")
        return raw, rag, pieces, None if trace is None else trace.steps

    async def _ainner(self, query_bundle: QueryBundle
                      ) -> tuple[Any, Any, list[str] | None, list[dict[str, Any]] | None]:
        """Async :meth:`_inner` (a task's context is its own)."""
        with capture(self.trace) as trace:
            raw = await self.query_engine.aquery(query_bundle)
            rag, pieces = await arecord(raw, "query_engine.aquery()")
        return raw, rag, pieces, None if trace is None else trace.steps

    @property
    def _streams(self) -> bool:
        """Whether the inner engine streams (then so does the closed-book LLM)."""
        return bool(getattr(self.query_engine, "_streaming", False)
                    or getattr(getattr(self.query_engine, "_response_synthesizer", None),
                               "_streaming", False))

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
            raise no_retrieve_error(self.query_engine) from None

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.retriever is not None:
            return self._retrieved(await self.retriever.aretrieve(query_bundle))
        aretrieve = getattr(self.query_engine, "aretrieve", None)
        try:
            nodes = (await aretrieve(query_bundle) if aretrieve is not None
                     else await asyncio.to_thread(self.query_engine.retrieve, query_bundle))
        except NotImplementedError:
            raise no_retrieve_error(self.query_engine) from None
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
                "source_nodes": ([node_ref(n) for n in response.source_nodes]
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

    # -- a policy that cannot change the answer ----------------------------------------------

    @property
    def fixed_side(self) -> Side | None:
        """The side the engine's policy keeps whatever the margins (always-RAG: the inner
        engine; always-Direct with ``llm``: the closed-book LLM), run alone and unscored;
        None when the engine must score (a margin policy; always-Direct without ``llm``,
        where the scorer model generates the closed-book answer in its scoring call)."""
        side = (self.arbiter.policy or self.tm.config.decision_policy).fixed_side
        return None if side == "direct" and self.llm is None else side

    def _closed_book_only(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """The closed-book LLM's answer alone, streamed as it is generated when the inner
        engine streams."""
        llm = cast("LLM", self.llm)
        question = {_question_variable(self.closed_book_prompt): query_bundle.query_str}
        if self._streams:
            return StreamingResponse(response_gen=llm.stream(self.closed_book_prompt,
                                                             **question), source_nodes=[])
        return Response(llm.predict(self.closed_book_prompt, **question), source_nodes=[])

    async def _aclosed_book_only(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        llm = cast("LLM", self.llm)
        question = {_question_variable(self.closed_book_prompt): query_bundle.query_str}
        if self._streams:
            return AsyncStreamingResponse(response_gen=await llm.astream(
                self.closed_book_prompt, **question), source_nodes=[])
        return Response(await llm.apredict(self.closed_book_prompt, **question),
                        source_nodes=[])

    # -- shadow mode ------------------------------------------------------------------------

    def _shadow_job(self, query_bundle: QueryBundle, served: Side, text: str,
                    nodes: Sequence[NodeWithScore]) -> Callable[[], None]:
        """The decision off the answer path, once the served side's ``text`` is complete."""
        shadow = cast("Shadow", self.shadow)

        def job() -> None:
            if served == "rag":
                rag: Any = Response(text, list(nodes))
                direct: str | None = self._closed_book(query_bundle, False)[0]
            else:
                rag = record(self.query_engine.query(query_bundle), "query_engine.query()")[0]
                direct = text
            evidence = self._retrieve(query_bundle) if self._needs_retrieval(rag) else None
            result = self.arbiter.arbitrate(query_bundle, direct, rag, source_nodes=evidence,
                                            policy=shadow.policy)
            decision = result.metadata[METADATA_KEY].decision
            weighed = evidence if evidence is not None else getattr(rag, "source_nodes", [])
            shadow.record(shadow_record(
                decision, query_bundle.query_str, [node_to_passage(n) for n in weighed],
                direct if direct is not None else decision.direct_raw or decision.direct_answer,
                getattr(rag, "response", None) or "", served))

        return job

    def _shadowed(self, query_bundle: QueryBundle, served: Side, answer: Any) -> Any:
        """``answer`` as the served side gave it; its shadow job queued when it is complete
        (a stream: when the caller has read its last piece)."""
        shadow = cast("Shadow", self.shadow)

        def submit(text: str) -> None:
            shadow.submit(self._shadow_job(query_bundle, served, text, answer.source_nodes))

        if isinstance(answer, StreamingResponse):
            answer.response_gen = _then(answer.response_gen, submit)
        elif isinstance(answer, AsyncStreamingResponse):
            answer.response_gen = _athen(answer.response_gen, submit)
        else:
            submit(getattr(answer, "response", None) or "")
        return answer

    # -- queries ---------------------------------------------------------------------------

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        self._check_query(query_bundle)
        fixed = self.fixed_side
        if self.shadow is not None:
            answer = (self._closed_book_only(query_bundle) if fixed == "direct"
                      else self.query_engine.query(query_bundle))
            return cast("RESPONSE_TYPE", self._shadowed(query_bundle, fixed or "rag", answer))
        if fixed == "rag":
            return self.query_engine.query(query_bundle)
        if fixed == "direct":
            return self._closed_book_only(query_bundle)
        # The two sides at once: the inner engine and the closed-book LLM in worker threads,
        # each in a copy of this context (LlamaIndex's spans nest under this query). A local
        # model serializes its forward passes, so they interleave; a remote engine or LLM
        # serves both at once.
        with ThreadPoolExecutor(max_workers=2) as pool:
            inner = pool.submit(contextvars.copy_context().run, self._inner, query_bundle)
            closed = pool.submit(contextvars.copy_context().run, self._closed_book,
                                 query_bundle, self._streams)
            raw, rag, rag_pieces, trace = inner.result()
            direct, direct_pieces = closed.result()
        nodes = self._retrieve(query_bundle) if self._needs_retrieval(rag) else None
        metadata = self._record(rag, nodes is not None, trace)
        result = self.arbiter.arbitrate(query_bundle, direct, rag, source_nodes=nodes,
                                        metadata=metadata)
        return like(raw, result, self._kept_pieces(result, rag_pieces, direct_pieces))

    def both_answers(self, question: str) -> BothAnswers:
        """The inner engine's answer and ``llm``'s closed-book answer to one question, run
        as a scoring query runs them (concurrently) but nothing scored, with the text of the
        inner response's source nodes. What ``trustmargin check --chain`` records for each
        labeled question; needs ``llm`` (the closed-book side)."""
        if self.llm is None:
            raise InvalidInputError("llm", "is None: the closed-book answer would be the "
                                    "scorer's, not your engine's",
                                    "pass the LLM your engine answers with (llm=...)")
        bundle = QueryBundle(question)
        self._check_query(bundle)
        with ThreadPoolExecutor(max_workers=2) as pool:
            inner = pool.submit(contextvars.copy_context().run, self._inner, bundle)
            closed = pool.submit(contextvars.copy_context().run, self._closed_book, bundle,
                                 False)
            _, rag, _, _ = inner.result()
            direct, _ = closed.result()
        nodes = getattr(rag, "source_nodes", None) or []
        return BothAnswers(direct=direct or "", rag=str(response_text(rag) or ""),
                           passages=tuple(n.node.get_content() for n in nodes))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        self._check_query(query_bundle)
        fixed = self.fixed_side
        if self.shadow is not None:
            answer = (await self._aclosed_book_only(query_bundle) if fixed == "direct"
                      else await self.query_engine.aquery(query_bundle))
            return cast("RESPONSE_TYPE", self._shadowed(query_bundle, fixed or "rag", answer))
        if fixed == "rag":
            return await self.query_engine.aquery(query_bundle)
        if fixed == "direct":
            return await self._aclosed_book_only(query_bundle)
        (raw, rag, rag_pieces, trace), (direct, direct_pieces) = await asyncio.gather(
            self._ainner(query_bundle), self._aclosed_book(query_bundle, self._streams))
        nodes = await self._aretrieve(query_bundle) if self._needs_retrieval(rag) else None
        metadata = self._record(rag, nodes is not None, trace)
        result = await self.arbiter.aarbitrate(query_bundle, direct, rag, source_nodes=nodes,
                                               metadata=metadata)
        return like(raw, result, self._kept_pieces(result, rag_pieces, direct_pieces))

    @staticmethod
    def _kept_pieces(result: Response, rag: list[str] | None, direct: list[str] | None
                     ) -> list[str] | None:
        decision = result.metadata[METADATA_KEY].decision if result.metadata else None
        if decision is None:
            return None
        return rag if chosen_side(decision) == "rag" else direct


def _then(pieces: Any, done: Callable[[str], None]) -> Generator[str, None, None]:
    """``pieces`` as they come; ``done(text)`` after the last one."""
    seen = []
    for piece in pieces:
        seen.append(piece)
        yield piece
    done("".join(seen))


async def _athen(pieces: Any, done: Callable[[str], None]) -> AsyncGenerator[str, None]:
    """Async :func:`_then`."""
    seen = []
    async for piece in pieces:
        seen.append(piece)
        yield piece
    done("".join(seen))
