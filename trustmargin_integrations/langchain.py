"""LangChain adapter: a router Runnable, a retriever over any project retriever, a local LLM
and a chain builder; and, for multi-step pipelines (IRCoT, FLARE, CLeHe-RAG, DTR-RAG), a
pipeline Runnable, a multi-step retriever and a chain that arbitrates a pipeline's answer
(:func:`build_pipeline_chain`).

The adapter is thin. It turns LangChain inputs (dicts, ``Document`` objects, chat messages)
into the core's input and returns the core :class:`~trustmargin_integrations.schema.Decision`
unchanged. Validation (:mod:`~trustmargin_integrations.validation`), passage formatting
(:meth:`~trustmargin_integrations.schema.Passage.as_context`), answer cleaning and scoring all
happen in the core (:class:`~trustmargin_integrations.arbiter.TrustMargin`); this module only
renames fields so that errors name the keys the user passed (``documents[1]``,
``inputs[1].question``).

The router scores with *its own* local model (``router.tm.backend``). When the two candidate
answers come from another model (a hosted chat model, say), the margins measure how the
scorer model judges those answers, not how the generating model would: the prior margin asks
"does the scorer's memory accept the RAG answer?", the binding margin asks "does the scorer
find that answer bound to this question by the passages?". The paper calibrates
``tau = -1.5`` for candidates produced by the scoring model itself, so with a different
generator treat the threshold as a starting point and re-check it on your own data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from langchain_core.callbacks import (
    CallbackManagerForLLMRun,
    CallbackManagerForRetrieverRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.language_models import LLM, BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import Generation, LLMResult
from langchain_core.prompts import PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSerializable,
)
from langchain_core.runnables.config import run_in_executor
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    field_validator,
)

from trustmargin_integrations.arbiter import PreparedQuestion, TrustMargin
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import (
    QUESTION_CONTEXT_TEMPLATE,
    QUESTION_ONLY_TEMPLATE,
    join_passages,
)
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import Decision, Passage
from trustmargin_integrations.validation import check_question

__all__ = [
    "MARGINS_EVENT",
    "PIPELINES_KEY",
    "PIPELINE_EVENT",
    "PIPELINE_KEY",
    "LocalLLM",
    "PipelineRetriever",
    "PipelineRunnable",
    "TrustMarginInput",
    "TrustMarginRetriever",
    "TrustMarginRouter",
    "build_pipeline_chain",
    "build_trustmargin_chain",
    "document_to_passage",
    "passage_to_document",
]

MARGINS_EVENT = "trustmargin_margins"
"""Name of the custom callback event each routed input emits with its margins."""

_FIX_SHAPE = ("pass a dict with 'question', 'direct_answer', 'rag_answer' and either "
              "'documents' (list of Document) or 'context' (str or list of str)")
_FIXES = {
    "question": "pass the user's question as text",
    "direct_answer": "pass the candidate's text (use StrOutputParser after a chat model), or "
                     "None to let the router's model generate it",
    "rag_answer": "pass the candidate's text (use StrOutputParser after a chat model), or "
                  "None to let the router's model generate it",
    "documents": "pass the retriever's output (a list of Document)",
    "context": "pass passage strings, or Document objects under 'documents'",
    "id": "pass a string identifier",
    "rag_candidates": "pass a mapping from name to answer text (e.g. {'bm25': ..., "
                      "'ircot': ...}), a list of texts or a list of (name, text) pairs",
    "metadata": "pass a dict of JSON values",
}
_CONFIG_SPECS = [
    ConfigurableFieldSpec(
        id="tau", annotation=float | None, name="tau", default=None,
        description="TrustMargin threshold for this call: RAG is chosen iff M > tau "
                    "(None: the router's tau, else tm.config.tau)."),
    ConfigurableFieldSpec(
        id="lambda_bind", annotation=float | None, name="lambda_bind", default=None,
        description="Weight of the binding margin for this call (None: the router's "
                    "lambda_bind, else tm.config.lambda_bind)."),
]
_TUNABLE = ("tau", "lambda_bind")


# -- documents <-> passages -------------------------------------------------------------------


def passage_to_document(passage: Passage) -> Document:
    """A project :class:`Passage` as a LangChain ``Document``.

    ``page_content`` is the passage text; ``metadata`` holds the passage's own metadata plus
    ``id``, ``title`` and ``score`` (the retriever's score).
    """
    return Document(page_content=passage.text, id=passage.id or None,
                    metadata={**passage.metadata, "id": passage.id, "title": passage.title,
                              "score": passage.score})


def document_to_passage(doc: Document) -> Passage:
    """A LangChain ``Document`` as the core's :class:`Passage` record.

    The id is ``doc.id``, else ``metadata["id"]``; the title and score come from
    ``metadata["title"]`` and ``metadata["score"]``. Scalar metadata is kept, so a
    ``passage_to_document`` round trip is lossless. The core formats the passage for the
    prompt with :meth:`Passage.as_context` (``title: text``), exactly as it formats the
    passages of its own retrievers.
    """
    meta = doc.metadata
    title = meta.get("title")
    score = meta.get("score")
    extra = {key: value for key, value in meta.items()
             if key not in ("id", "title", "score") and isinstance(key, str)
             and (value is None or isinstance(value, (str, int, float, bool)))}
    return Passage(
        id=str(doc.id or meta.get("id") or ""),
        text=doc.page_content,
        title="" if title is None else str(title),
        score=(float(score) if isinstance(score, (int, float)) and not isinstance(score, bool)
               else None),
        metadata=extra,
    )


# -- the retriever ----------------------------------------------------------------------------


class TrustMarginRetriever(BaseRetriever):
    """A LangChain retriever over any project retriever.

    ``retriever`` is anything with ``search(query, k) -> list[Passage]``: the embedded
    :class:`~trustmargin_integrations.retrieval.bm25.BM25Index`, an
    :class:`~trustmargin_integrations.retrieval.elasticsearch.ElasticsearchRetriever`, or your
    own. ``k`` is the default number of documents; ``invoke(query, k=1)`` overrides it for
    one call. Each ``Document`` carries ``id`` and the metadata described in
    :func:`passage_to_document`.

    Example:
        >>> retriever = TrustMarginRetriever(retriever=BM25Index.build(passages), k=4)
        ... # doctest: +SKIP
        >>> retriever.invoke("Who designed the Velmora Bridge?", k=1)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = Field(description="A project retriever: search(query, k) -> Passages.")
    k: int = Field(4, ge=1, description="Documents returned per query (invoke(q, k=...) "
                                        "overrides it for one call).")

    @field_validator("retriever")
    @classmethod
    def _searchable(cls, value: Any) -> Any:
        if not callable(getattr(value, "search", None)):
            raise ValueError(f"a {type(value).__name__} has no search(query, k) method; pass "
                             "a BM25Index, an ElasticsearchRetriever or any object with "
                             "search(query, k) -> list[Passage]")
        return value

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        # retrieve_batch is the core's retrieval stage: it checks k and that hits are Passages.
        hits = retrieve_batch(self.retriever, [query], self.k if k is None else k)[0]
        return [passage_to_document(p) for p in hits]


class _DocumentSearch:
    """A LangChain retriever seen as a project retriever, for the core's pipeline.

    LangChain retrievers have no portable ``k`` argument, so ``k`` keeps the first ``k``
    documents of what the retriever returns.
    """

    def __init__(self, runnable: Runnable[str, list[Document]], config: RunnableConfig) -> None:
        self.runnable = runnable
        self.config = config

    def search(self, query: str, k: int) -> list[Passage]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        rows = self.runnable.batch(list(queries), self.config)
        out = []
        for i, docs in enumerate(rows):
            for j, doc in enumerate(docs):
                if not isinstance(doc, Document):
                    raise InvalidInputError(f"retriever(questions[{i}])[{j}]",
                                            f"is a {type(doc).__name__}, not a Document",
                                            "use a retriever that returns Documents")
            out.append([document_to_passage(d) for d in docs[:k]])
        return out


# -- the router -------------------------------------------------------------------------------


class TrustMarginInput(BaseModel):
    """What :class:`TrustMarginRouter` reads from each input dict; the router parses every
    input with this model.

    ``direct_answer`` and ``rag_answer`` are required keys; an explicit ``None`` asks the
    router's local model to generate that candidate. The evidence is ``documents``
    (LangChain ``Document`` objects, e.g. a retriever's output, or their dict form) or, when
    there are no documents, ``context`` (passage strings; a single string counts as one
    passage). An empty list means nothing was retrieved: the decision is the closed-book
    answer with reason ``no_evidence``. When both are present ``documents`` is used, so a
    chain may keep a formatted ``context`` string for its RAG prompt next to the documents.

    Optional: ``rag_candidates`` gives several RAG-side candidates at once (e.g. ``{"bm25":
    ..., "ircot": ...}``, with ``rag_answer=None``); the rule keeps Direct or the best of
    them (see :meth:`TrustMargin.arbitrate`). ``metadata`` is JSON data copied to the
    Decision's ``metadata`` (the audit record), e.g. a pipeline's trace. Other keys are
    ignored.
    """

    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True)

    question: StrictStr = Field(description="The user's question.")
    direct_answer: StrictStr | None = Field(
        description="Closed-book answer; None = generate it.")
    rag_answer: StrictStr | None = Field(
        description="Retrieval-augmented answer; None = generate it.")
    documents: list[Document] | None = Field(
        None, description="Retrieved documents, in order ([] = nothing retrieved).")
    context: StrictStr | list[StrictStr] | None = Field(
        None, description="Passages, when no documents (one string = one passage).")
    id: StrictStr | None = Field(
        None, description="Caller's identifier, copied to the Decision.")
    rag_candidates: dict[StrictStr, StrictStr] | list[StrictStr | tuple[StrictStr, StrictStr]] \
        | None = Field(
            None, description="Several RAG-side candidates (name -> text, texts, or (name, "
                              "text) pairs) instead of rag_answer, which must then be None.")
    metadata: dict[str, Any] | None = Field(
        None, description="JSON data copied to Decision.metadata (e.g. a pipeline's trace).")

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        # Record ids are often integers; the Decision keeps them as text.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _schema_error(exc: ValidationError, where: str | None) -> InvalidInputError:
    """The first key's schema violation as an error naming that key (``documents[1]``)."""
    errors = exc.errors()
    # A union (context: str | list[str]) reports each member; the deepest path is the useful one.
    first = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]]
    err = max(first, key=lambda e: sum(isinstance(p, int) for p in e["loc"]))
    path = ""
    after_index = False
    for part in err["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
            after_index = True
        elif not path:
            path = str(part)
        elif after_index:  # a field of a nested record, e.g. documents[0].page_content
            path += f".{part}"
            after_index = False
        # any other string is a union member's tag ("str", "list[str]"), not a key
    field = f"{where}.{path}" if where and path else (where or path or "input")
    if err["type"] == "missing":
        problem = "is missing"
        if path == "question":
            fix = "add the user's question"
        elif path in ("direct_answer", "rag_answer"):
            fix = f"add '{path}' (None lets the router's model generate it)"
        else:
            fix = _FIXES.get(path, _FIX_SHAPE)
    else:
        problem = (err["msg"].replace("Input should be", "must be")
                   + f", got {type(err['input']).__name__}")
        fix = _FIXES.get(path.split("[")[0].split(".")[0], _FIX_SHAPE)
    return InvalidInputError(field, problem, fix)


def _core_input(value: Any, where: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Parse one router input with :class:`TrustMarginInput`; return the core's input and the
    field names (``passages`` -> ``documents``) that the core's errors should use."""
    try:
        record = TrustMarginInput.model_validate(value)
    except ValidationError as exc:
        raise _schema_error(exc, where) from None
    except (TypeError, ValueError) as exc:
        # Document's own __init__ raises TypeError for a dict without page_content, outside
        # pydantic's error reporting.
        docs = value.get("documents") if isinstance(value, Mapping) else None
        bad = next((i for i, d in enumerate(docs or []) if isinstance(d, Mapping)
                    and not isinstance(d.get("page_content"), str)), None)
        key = "documents" if bad is None else f"documents[{bad}]"
        name = f"{where}.{key}" if where else key
        raise InvalidInputError(name, f"is not a Document ({exc})",
                                "pass Document objects or {'page_content': str, 'metadata': "
                                "dict} records") from None
    if record.documents is not None:
        passages: Any = [document_to_passage(d) for d in record.documents]
        key = "documents"
    elif record.context is not None:
        passages = [record.context] if isinstance(record.context, str) else record.context
        key = "context"
    else:
        name = f"{where}.documents" if where else "documents"
        raise InvalidInputError(name, "is missing (and so is 'context')",
                                "add the retrieved documents under 'documents' (an empty list "
                                "when nothing was retrieved), or passage strings under "
                                "'context'")
    item = {"question": record.question, "passages": passages,
            "direct_answer": record.direct_answer, "rag_answer": record.rag_answer,
            "id": record.id}
    # Only when given, so that an input without them reaches the core exactly as before.
    if record.rag_candidates is not None:
        item["rag_candidates"] = record.rag_candidates
    if record.metadata is not None:
        item["metadata"] = record.metadata
    return item, {"passages": key}


def _margins(decision: Decision) -> dict[str, Any]:
    """What the margins event carries: enough to audit the choice without the Decision."""
    return {key: getattr(decision, key) for key in
            ("id", "question", "source", "reason", "answer", "m_prior", "m_bind", "m",
             "lambda_bind", "tau")}


def _arbiter(tm: TrustMargin, config: RunnableConfig | None, defaults: Mapping[str, Any]
             ) -> TrustMargin:
    """``tm``, or a TrustMargin on the same backend with this call's tau / lambda_bind.

    Precedence: ``config["configurable"]``, then the router's own fields (``defaults``),
    then ``tm.config``.
    """
    configurable = (config or {}).get("configurable") or {}
    update = {}
    for key in _TUNABLE:
        value = configurable.get(key, defaults.get(key))
        if value is not None and value != getattr(tm.config, key):
            update[key] = value
    if not update:
        return tm
    try:
        # model_validate, not model_copy(update=...): a NaN tau must be refused, not applied.
        cfg = TrustMarginConfig.model_validate({**tm.config.model_dump(), **update})
    except InvalidInputError as exc:
        raise InvalidInputError(f"configurable.{exc.field}", exc.problem, exc.fix) from None
    return TrustMargin(tm.backend, cfg)


def _settings(tm: TrustMargin) -> tuple[float, float]:
    return tm.config.tau, tm.config.lambda_bind


class TrustMarginRouter(RunnableSerializable[TrustMarginInput, Decision]):
    """Route between a closed-book and a RAG answer with TrustMargin.

    Input: a dict shaped like :class:`TrustMarginInput` (parsed with that model; the core
    then validates the content, and every error names the key you passed, e.g.
    ``documents[1]``, or ``inputs[1].question`` in a batch). Output: the core
    :class:`~trustmargin_integrations.schema.Decision`, so ``.answer`` is one attribute away
    and the margins (``m_prior``, ``m_bind``, ``m``) travel with it.

    Per call, ``router.with_config(configurable={"tau": -0.5, "lambda_bind": 1.0})`` changes
    the rule's hyper-parameters (recorded in the Decision); the router's own ``tau`` /
    ``lambda_bind`` fields set its defaults. Both fall back to ``tm.config``.

    ``batch``/``abatch`` send all valid inputs to the scorer in one
    ``TrustMargin.arbitrate_batch`` call (one per distinct tau/lambda_bind when the configs
    differ). Each input still gets its own traced run whose output is its Decision, and a
    :data:`MARGINS_EVENT` custom event with its margins.

    Example:
        >>> router = TrustMarginRouter(tm=TrustMargin.from_pretrained())  # doctest: +SKIP
        >>> router.invoke({"question": "Who wrote Hamlet?", "direct_answer": "Shakespeare",
        ...                "rag_answer": "Marlowe", "context": ["Hamlet ..."]})  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tm: TrustMargin = Field(description="The arbiter; its backend is the scorer model.")
    include_prompts: bool | None = Field(
        None, description="Attach rendered prompts to each Decision (None: tm.config's value).")
    tau: float | None = Field(
        None, allow_inf_nan=False, description="Threshold (None: tm.config.tau).")
    lambda_bind: float | None = Field(
        None, allow_inf_nan=False, description="Binding-margin weight (None: "
                                               "tm.config.lambda_bind).")

    @property
    def InputType(self) -> type[TrustMarginInput]:  # noqa: N802 (LangChain's name)
        """The typed input record."""
        return TrustMarginInput

    @property
    def OutputType(self) -> type[Decision]:  # noqa: N802 (LangChain's name)
        """The core Decision."""
        return Decision

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """``tau`` and ``lambda_bind``, settable per call under ``configurable``."""
        return list(_CONFIG_SPECS)

    def arbiter(self, config: RunnableConfig | None = None) -> TrustMargin:
        """The TrustMargin a call with ``config`` uses (same backend, its tau/lambda_bind)."""
        return _arbiter(self.tm, config, {"tau": self.tau, "lambda_bind": self.lambda_bind})

    # -- core call: raw inputs -> Decisions or per-input errors ------------------------------

    def _decide(self, values: list[Any], configs: list[RunnableConfig], *, fail_fast: bool,
                batched: bool) -> list[Decision | Exception]:
        out: list[Decision | Exception | None] = [None] * len(values)
        groups: dict[tuple[float, float], tuple[TrustMargin, list[tuple[int, PreparedQuestion]]]]
        groups = {}
        for i, (value, config) in enumerate(zip(values, configs, strict=True)):
            where = f"inputs[{i}]" if batched else None
            try:
                tm = self.arbiter(config)
                item, names = _core_input(value, where)
                # The core validates (and prepares) here, with the user's names and the
                # input's own batch position; arbitrate_batch takes the prepared question.
                prepared = tm.prepare(item, where=where, names=names)
            except InvalidInputError as exc:
                if fail_fast:
                    raise
                out[i] = exc
                continue
            groups.setdefault(_settings(tm), (tm, []))[1].append((i, prepared))
        for tm, ready in groups.values():
            decisions = tm.arbitrate_batch([item for _, item in ready],
                                           include_prompts=self.include_prompts)
            for (i, _), decision in zip(ready, decisions, strict=True):
                out[i] = decision
        return [cast("Decision | Exception", o) for o in out]

    def _route(self, values: list[Any], config: list[RunnableConfig], *, fail_fast: bool,
               batched: bool = True) -> list[Decision | Exception]:
        results = self._decide(values, config, fail_fast=fail_fast, batched=batched)
        for result, cfg in zip(results, config, strict=True):
            if isinstance(result, Decision):
                dispatch_custom_event(MARGINS_EVENT, _margins(result), config=cfg)
        return results

    async def _aroute(self, values: list[Any], config: list[RunnableConfig], *,
                      fail_fast: bool, batched: bool = True) -> list[Decision | Exception]:
        results = await run_in_executor(None, self._decide, values, config,
                                        fail_fast=fail_fast, batched=batched)
        for result, cfg in zip(results, config, strict=True):
            if isinstance(result, Decision):
                await adispatch_custom_event(MARGINS_EVENT, _margins(result), config=cfg)
        return results

    def _route_one(self, value: Any, config: RunnableConfig) -> Decision:
        return cast(Decision, self._route([value], [config], fail_fast=True, batched=False)[0])

    async def _aroute_one(self, value: Any, config: RunnableConfig) -> Decision:
        results = await self._aroute([value], [config], fail_fast=True, batched=False)
        return cast(Decision, results[0])

    # -- Runnable API ------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
               ) -> Decision:
        """Arbitrate one input dict."""
        return self._call_with_config(self._route_one, input, config, run_type="chain")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
                      ) -> Decision:
        """Async :meth:`invoke` (scoring runs in a worker thread)."""
        return await self._acall_with_config(self._aroute_one, input, config,
                                             run_type="chain")

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None
              = None, *, return_exceptions: bool = False, **kwargs: Any) -> list[Decision]:
        """Arbitrate many inputs with one ``arbitrate_batch`` call (not a thread per input).

        With ``return_exceptions=True`` an invalid input yields its ``InvalidInputError``
        in place and the others are still scored together.
        """
        return self._batch_with_config(self._route, inputs, config,
                                       return_exceptions=return_exceptions, run_type="chain",
                                       fail_fast=not return_exceptions)

    async def abatch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig]
                     | None = None, *, return_exceptions: bool = False, **kwargs: Any
                     ) -> list[Decision]:
        """Async :meth:`batch`: one ``arbitrate_batch`` call in a worker thread."""
        return await self._abatch_with_config(self._aroute, inputs, config,
                                              return_exceptions=return_exceptions,
                                              run_type="chain", fail_fast=not return_exceptions)


class _CorePipeline(RunnableSerializable[str, Decision]):
    """The core's whole pipeline as one chain step: ``TrustMargin.answer_batch``.

    The scorer model retrieves, generates both candidates and arbitrates; a batch of
    questions is one ``answer_batch`` call (per distinct tau/lambda_bind).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = Field(description="A project retriever, or a LangChain retriever.")
    k: int | None = Field(None, description="Passages per question (None: tm.config.top_k).")
    router: TrustMarginRouter

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return list(_CONFIG_SPECS)

    def _run(self, questions: list[str], config: list[RunnableConfig]) -> list[Decision]:
        out: list[Decision | None] = [None] * len(questions)
        groups: dict[tuple[float, float], tuple[TrustMargin, RunnableConfig, list[int]]] = {}
        for i, cfg in enumerate(config):
            tm = self.router.arbiter(cfg)
            groups.setdefault(_settings(tm), (tm, cfg, []))[2].append(i)
        for tm, cfg, rows in groups.values():
            search: Retriever = (_DocumentSearch(self.retriever, cfg)
                                 if isinstance(self.retriever, Runnable) else self.retriever)
            decisions = tm.answer_batch([questions[i] for i in rows], search, self.k,
                                        include_prompts=self.router.include_prompts)
            for i, decision in zip(rows, decisions, strict=True):
                out[i] = decision
        return [d for d in out if d is not None]

    def _report(self, questions: list[str], config: list[RunnableConfig]) -> list[Decision]:
        decisions = self._run(questions, config)
        for decision, cfg in zip(decisions, config, strict=True):
            dispatch_custom_event(MARGINS_EVENT, _margins(decision), config=cfg)
        return decisions

    def _one(self, question: str, config: RunnableConfig) -> Decision:
        return self._report([question], [config])[0]

    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any
               ) -> Decision:
        """Answer one question with the core's pipeline."""
        return self._call_with_config(self._one, input, config, run_type="chain")

    def batch(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None
              = None, *, return_exceptions: bool = False, **kwargs: Any) -> list[Decision]:
        """Answer many questions with one ``answer_batch`` call."""
        return self._batch_with_config(self._report, inputs, config,
                                       return_exceptions=return_exceptions, run_type="chain")


# -- the local LLM ----------------------------------------------------------------------------


class LocalLLM(LLM):
    """A LangChain LLM on a local TrustMargin backend (greedy decoding, chat template on).

    Each prompt is sent as one user message through the backend's chat template, so
    ``PromptTemplate.from_template(QUESTION_ONLY_TEMPLATE) | LocalLLM(...)`` produces exactly
    the generation the core would make. A batch of prompts is one ``backend.generate`` call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(20, ge=1, le=512, description="Greedy generation length.")

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> LocalLLM:
        """Share the arbiter's model (no second copy in memory)."""
        kwargs.setdefault("max_new_tokens", tm.config.max_new_tokens)
        return cls(backend=tm.backend, **kwargs)

    @property
    def _llm_type(self) -> str:
        return "trustmargin-local"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": getattr(self.backend, "model_id", "unknown"),
                "max_new_tokens": self.max_new_tokens}

    def _generate(self, prompts: list[str], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                  ) -> LLMResult:
        backend = cast(Backend, self.backend)
        rendered = [backend.render_prompt(p) for p in prompts]
        texts = backend.generate(rendered, self.max_new_tokens)
        return LLMResult(generations=[[Generation(text=_cut_at_stop(t, stop))] for t in texts])

    def _call(self, prompt: str, stop: list[str] | None = None,
              run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> str:
        return self._generate([prompt], stop, run_manager).generations[0][0].text


def _cut_at_stop(text: str, stop: list[str] | None) -> str:
    cut = len(text)
    for s in stop or []:
        found = text.find(s)
        if found != -1:
            cut = min(cut, found)
    return text[:cut]


# -- the chain builder -----------------------------------------------------------------------


def _question_of(value: Any) -> str:
    if isinstance(value, Mapping):
        if "question" not in value:
            raise InvalidInputError("question", "is missing",
                                    "invoke the chain with the question string or "
                                    "{'question': ...}")
        value = value["question"]
    if not isinstance(value, str):
        raise InvalidInputError("question", f"must be a string, got {type(value).__name__}",
                                "invoke the chain with the question text")
    return value


def _text_of(value: Any) -> str | None:
    if isinstance(value, BaseMessage):
        return value.text
    if value is None or isinstance(value, str):
        return value
    raise InvalidInputError("answer", f"a candidate chain returned a {type(value).__name__}",
                            "end the closed-book and RAG chains with a string or a message")


def _answer_step(piece: Runnable[Any, Any] | BaseLanguageModel[Any] | None, template: str,
                 name: str) -> Runnable[Any, str | None]:
    if piece is None:
        # None reaches the router as a missing candidate: its scorer model generates it.
        return RunnableLambda(lambda _: None, name=f"{name}_by_scorer")
    step: Runnable[Any, Any] = piece
    if isinstance(piece, BaseLanguageModel):
        # A bare model gets the paper's appendix prompt, so its answers are short phrases.
        step = PromptTemplate.from_template(template) | piece
    # No cleaning here: the core cleans every candidate and records what it changed.
    return (step | RunnableLambda(_text_of, name="to_text")).with_config(run_name=name)


def _context_of(value: Mapping[str, Any]) -> str:
    return join_passages([document_to_passage(d).as_context() for d in value["documents"]])


def _no_documents(value: Mapping[str, Any]) -> bool:
    return not value["documents"]


def _as_langchain_retriever(retriever: Any, k: int | None, tm: TrustMargin
                            ) -> Runnable[str, list[Document]]:
    if isinstance(retriever, TrustMarginRetriever):
        return retriever if k is None else retriever.model_copy(update={"k": k})
    if isinstance(retriever, Runnable):
        if k is not None:
            raise InvalidInputError("k", "cannot be applied to this LangChain retriever",
                                    "set the number of documents on the retriever itself")
        return retriever
    if callable(getattr(retriever, "search", None)):
        return TrustMarginRetriever(retriever=retriever, k=tm.config.top_k if k is None else k)
    raise InvalidInputError("retriever", f"a {type(retriever).__name__} is neither a LangChain "
                            "retriever nor has a search(query, k) method",
                            "pass a LangChain retriever, a BM25Index, an "
                            "ElasticsearchRetriever or any object with search(query, k)")


def _as_project_retriever(retriever: Any, k: int | None) -> tuple[Any, int | None]:
    if isinstance(retriever, TrustMarginRetriever):
        return retriever.retriever, retriever.k if k is None else k
    if isinstance(retriever, Runnable) or callable(getattr(retriever, "search", None)):
        return retriever, k
    raise InvalidInputError("retriever", f"a {type(retriever).__name__} is neither a LangChain "
                            "retriever nor has a search(query, k) method",
                            "pass a LangChain retriever, a BM25Index, an "
                            "ElasticsearchRetriever or any object with search(query, k)")


def build_trustmargin_chain(
    retriever: Runnable[str, list[Document]] | Retriever,
    closed_book: Runnable[Any, Any] | BaseLanguageModel[Any] | None,
    rag: Runnable[Any, Any] | BaseLanguageModel[Any] | None,
    router: TrustMarginRouter,
    *,
    k: int | None = None,
) -> Runnable[Any, Decision]:
    """The full chain: retrieve -> both answers -> route, from the question to a Decision.

    With ``closed_book`` and ``rag`` both ``None`` the chain is the core's own pipeline
    (``router.tm.answer_batch``): the scorer model retrieves, generates both candidates and
    arbitrates; ``chain.batch`` is one ``answer_batch`` call. Otherwise it is an LCEL chain
    whose every step shows in a trace: retrieve, both candidates in parallel (a ``None``
    side is generated by the scorer), then :class:`TrustMarginRouter`. Candidates are
    cleaned by the core (``TrustMarginConfig.clean_answers``), not by the chain.

    When nothing is retrieved the RAG step is skipped and the Decision is the closed-book
    answer with reason ``no_evidence``.

    Args:
        retriever: a LangChain retriever (returns ``Document`` objects for the question
            string), or a project retriever (anything with ``search(query, k)``, e.g. a
            :class:`~trustmargin_integrations.retrieval.bm25.BM25Index`), which is wrapped
            in :class:`TrustMarginRetriever`.
        closed_book: a chain reading ``{"question"}`` (e.g. ``prompt | llm | parser``), or a
            bare LLM/chat model, which gets the paper's question-only prompt.
        rag: a chain reading ``{"question", "context", "documents"}`` where ``context`` is
            the documents joined as ``Passage i: title: text`` lines, or a bare model, which
            gets the paper's question+context prompt.
        router: the :class:`TrustMarginRouter` that decides (its ``tm`` is the scorer).
        k: passages per question for a project retriever (default ``tm.config.top_k``) or a
            :class:`TrustMarginRetriever` (default its own ``k``).

    Returns:
        A Runnable from the question (str or ``{"question": ...}``) to a ``Decision``.
    """
    question = RunnableLambda(_question_of, name="question")
    if closed_book is None and rag is None:
        search, passages = _as_project_retriever(retriever, k)
        pipeline = _CorePipeline(retriever=search, k=passages, router=router)
        return (question | pipeline.with_config(run_name="trustmargin_answer")
                ).with_config(run_name="TrustMarginChain")
    documents = _as_langchain_retriever(retriever, k, router.tm)
    skip_rag = RunnableLambda(lambda _: None, name="no_documents")
    return (
        RunnableParallel(question=question, documents=question | documents)
        | RunnablePassthrough.assign(context=RunnableLambda(_context_of, name="context"))
        | RunnablePassthrough.assign(
            direct_answer=_answer_step(closed_book, QUESTION_ONLY_TEMPLATE, "closed_book"),
            rag_answer=RunnableBranch(
                (RunnableLambda(_no_documents, name="no_documents?"), skip_rag),
                _answer_step(rag, QUESTION_CONTEXT_TEMPLATE, "rag")),
        )
        | router
    ).with_config(run_name="TrustMarginChain")


# -- multi-step pipelines ---------------------------------------------------------------------

PIPELINE_EVENT = "trustmargin_pipeline"
"""Name of the custom callback event each pipeline run emits with its trace
(``PipelineResult.to_metadata()``)."""

PIPELINE_KEY = "pipeline"
"""``Decision.metadata`` key of the trace when one pipeline gives the RAG-side answer."""

PIPELINES_KEY = "pipelines"
"""``Decision.metadata`` key of the traces (name -> trace) when several candidates compete."""


def _check_pipeline(value: Any, field: str) -> Any:
    """``value`` when it behaves like a project pipeline (name, run, run_batch)."""
    if not (isinstance(getattr(value, "name", None), str) and callable(getattr(value, "run", None))
            and callable(getattr(value, "run_batch", None))):
        raise InvalidInputError(field, f"a {type(value).__name__} is not a pipeline (it needs "
                                "name, run(question) and run_batch(questions))",
                                "pass a pipeline from trustmargin_integrations.pipelines, e.g. "
                                "build_pipeline('ircot', tm.backend, index, k=3)")
    return value


def _pipeline_question(value: Any, where: str | None = None) -> str:
    """The question of a chain or pipeline input; a blank one is refused before any model
    call (a pipeline would otherwise spend its steps on it)."""
    try:
        question = check_question(_question_of(value))
    except InvalidInputError as exc:
        if where is None:
            raise
        raise InvalidInputError(f"{where}.{exc.field}", exc.problem, exc.fix) from None
    return question


class PipelineRunnable(RunnableSerializable[Any, Any]):
    """A multi-step RAG pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as a Runnable:
    question -> :class:`~trustmargin_integrations.pipelines.PipelineResult`.

    The input is the question string or ``{"question": ...}``; the output is the pipeline's
    answer with its whole trace (``.answer``, ``.passages``, ``.steps``,
    ``.to_metadata()``). ``batch`` is one ``pipeline.run_batch`` call, so pipelines that
    batch their model calls (IRCoT, DTR-RAG) do so across the inputs. Each run honours
    ``config`` (run name, tags, callbacks): its output is the ``PipelineResult`` and it
    emits a :data:`PIPELINE_EVENT` custom event carrying the trace.

    Example:
        >>> ircot = build_pipeline("ircot", tm.backend, index, k=3)  # doctest: +SKIP
        >>> PipelineRunnable(ircot).invoke("Who directed ...?").answer  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any = Field(description="A project pipeline (see trustmargin_integrations."
                                      "pipelines.build_pipeline).")

    def __init__(self, pipeline: Any, **kwargs: Any) -> None:
        # Checked here, not in a field validator, so the error is the typed InvalidInputError.
        super().__init__(pipeline=_check_pipeline(pipeline, "pipeline"), **kwargs)

    @property
    def InputType(self) -> type[str]:  # noqa: N802 (LangChain's name)
        """The question text (``{"question": ...}`` is accepted too)."""
        return str

    @property
    def OutputType(self) -> type[Any]:  # noqa: N802 (LangChain's name)
        """:class:`~trustmargin_integrations.pipelines.PipelineResult`."""
        from trustmargin_integrations.pipelines.base import PipelineResult

        return PipelineResult

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        """The pipeline's registry name (``ircot``...) unless a run name is given."""
        return super().get_name(suffix, name=name or str(self.pipeline.name))

    def _run(self, values: list[Any], config: list[RunnableConfig], *, batched: bool = True
             ) -> list[Any]:
        out: list[Any] = []
        ready: list[tuple[int, str]] = []
        for i, value in enumerate(values):
            try:
                ready.append((i, _pipeline_question(value, f"inputs[{i}]" if batched else None)))
                out.append(None)
            except InvalidInputError as exc:
                out.append(exc)
        if ready:
            results = self.pipeline.run_batch([q for _, q in ready])
            for (i, _), result in zip(ready, results, strict=True):
                out[i] = result
                dispatch_custom_event(PIPELINE_EVENT, result.to_metadata(), config=config[i])
        return out

    def _one(self, value: Any, config: RunnableConfig) -> Any:
        result = self._run([value], [config], batched=False)[0]
        if isinstance(result, Exception):
            raise result
        return result

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the pipeline on one question; returns its ``PipelineResult``."""
        return self._call_with_config(self._one, input, config, run_type="chain")

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None
              = None, *, return_exceptions: bool = False, **kwargs: Any) -> list[Any]:
        """Run the pipeline on many questions with one ``run_batch`` call.

        An invalid input is an ``InvalidInputError`` naming ``inputs[i].question``: raised,
        or with ``return_exceptions=True`` returned in its place while the others run.
        """
        return self._batch_with_config(self._run, inputs, config,
                                       return_exceptions=return_exceptions, run_type="chain")

    async def abatch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig]
                     | None = None, *, return_exceptions: bool = False, **kwargs: Any
                     ) -> list[Any]:
        """Async :meth:`batch`: one ``run_batch`` call in a worker thread (not one thread
        per input, which would only queue on the model)."""
        return await run_in_executor(None, self.batch, inputs, config,
                                     return_exceptions=return_exceptions)


class PipelineRetriever(BaseRetriever):
    """A multi-step retriever: the documents a pipeline gathered for the query.

    For IRCoT these are the passages retrieved with the question and with each reasoning
    sentence (deduplicated, within the pipeline's context budget): the evidence its answer
    was conditioned on (``PipelineResult.passages``). The pipeline runs in full, so its
    answer is computed and dropped; use :class:`PipelineRunnable` to keep it and the trace.
    Each ``Document`` is :func:`passage_to_document` of a passage plus
    ``metadata["pipeline"]`` (the pipeline's name).

    Example:
        >>> retriever = PipelineRetriever(build_pipeline("ircot", tm.backend, index))
        ... # doctest: +SKIP
        >>> retriever.invoke("Who is the mother of the director of ...?")  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    pipeline: Any = Field(description="A project pipeline whose gathered passages are "
                                      "returned.")

    def __init__(self, pipeline: Any, **kwargs: Any) -> None:
        super().__init__(pipeline=_check_pipeline(pipeline, "pipeline"), **kwargs)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        result = self.pipeline.run(_pipeline_question(query))
        docs = [passage_to_document(p) for p in result.passages]
        for doc in docs:
            doc.metadata["pipeline"] = result.pipeline
        return docs


def _candidate_step(name: str, piece: Any) -> Runnable[Any, Any]:
    """One RAG-side candidate over the chain's state ``{question, documents, context}``: a
    pipeline answers from the question alone, a chain or model from the question's
    documents (a bare model gets the paper's question+context prompt: BM25-RAG)."""
    if isinstance(piece, Runnable) and not isinstance(piece, PipelineRunnable):
        return _answer_step(piece, QUESTION_CONTEXT_TEMPLATE, name)
    runnable = piece if isinstance(piece, PipelineRunnable) else PipelineRunnable(
        _check_pipeline(piece, f"pipeline[{name!r}]"))
    return (RunnableLambda(lambda state: state["question"], name="question")
            | runnable.with_config(run_name=name))


def _router_input(state: Mapping[str, Any], single: str | None) -> dict[str, Any]:
    """The router's input: the question's documents, Direct, the candidates, the traces."""
    from trustmargin_integrations.pipelines.base import PipelineResult

    texts: dict[str, str] = {}
    traces: dict[str, Any] = {}
    for name, value in state["candidates"].items():
        if isinstance(value, PipelineResult):
            texts[name] = value.answer
            traces[name] = value.to_metadata()
        else:
            texts[name] = "" if value is None else value
    item = {"question": state["question"], "documents": state["documents"],
            "direct_answer": state["direct_answer"]}
    if single is not None:
        item.update(rag_answer=texts[single], metadata={PIPELINE_KEY: traces[single]})
    else:
        item.update(rag_answer=None, rag_candidates=texts, metadata={PIPELINES_KEY: traces})
    return item


def build_pipeline_chain(
    pipeline: Any,
    router: TrustMarginRouter,
    retriever: Runnable[str, list[Document]] | Retriever | None = None,
    *,
    closed_book: Runnable[Any, Any] | BaseLanguageModel[Any] | None = None,
    k: int | None = None,
) -> Runnable[Any, Decision]:
    """TrustMargin over multi-step pipelines: question -> [closed-book answer, pipeline
    answer with its trace] -> :class:`TrustMarginRouter` -> ``Decision``.

    As in the paper, the pipeline's answer is the RAG-side candidate and is scored against
    the top-``k`` passages of the *question* from ``retriever`` (the pool BM25-RAG would
    use), not against the passages the pipeline gathered itself: every candidate is judged
    on the same evidence. The pipeline's trace (steps, queries, passages, parameters) lands
    in the Decision's ``metadata["pipeline"]``.

    With several candidates (a mapping such as ``{"bm25": llm, "ircot": ircot}``) they are
    arbitrated at once as ``rag_candidates``: the rule keeps Direct or the best of them
    (``decision.rag_candidates``, ``decision.winner``), and the traces land in
    ``metadata["pipelines"]`` by name. A mapping value is a pipeline, a
    :class:`PipelineRunnable`, a chain reading ``{"question", "context", "documents"}``, or a
    bare model, which answers with the paper's question+context prompt over the question's
    documents, i.e. BM25-RAG.

    ``chain.batch`` runs each pipeline once over all questions (``run_batch``) and scores
    them in one ``arbitrate_batch`` call. Every step shows in a trace; each pipeline run
    emits :data:`PIPELINE_EVENT` and the router :data:`MARGINS_EVENT`. When the question
    retrieves nothing the Decision is the closed-book answer with reason ``no_evidence``
    (the pipelines still run and their traces are kept).

    Args:
        pipeline: a project pipeline (``build_pipeline("ircot", backend, index, ...)``), or a
            mapping from candidate name to pipeline / chain / model.
        router: the :class:`TrustMarginRouter` that decides (its ``tm`` is the scorer).
        retriever: the evidence pool: a LangChain retriever or a project retriever. None:
            the pipeline's own retriever (for a mapping, the first pipeline's).
        closed_book: a chain reading ``{"question"}`` or a bare model for the Direct answer;
            None lets the scorer model generate it (the paper's same-model setting).
        k: passages per question from a project retriever (default ``tm.config.top_k``).

    Returns:
        A Runnable from the question (str or ``{"question": ...}``) to a ``Decision``.

    Raises:
        InvalidInputError: (``pipeline``, ``pipeline['name']``, ``retriever``, ``k``) at
            build time; (``question``) at call time for a missing or blank question.
    """
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidInputError("k", f"must be a positive integer, got {k!r}",
                                "ask for at least one passage per question")
    if isinstance(pipeline, Mapping):
        if not pipeline:
            raise InvalidInputError("pipeline", "is an empty mapping",
                                    "pass at least one candidate, e.g. {'ircot': ircot}")
        for name in pipeline:
            if not isinstance(name, str) or not name.strip():
                raise InvalidInputError("pipeline", f"has a candidate name {name!r}",
                                        "name candidates like 'bm25' or 'ircot'")
        pieces = dict(pipeline)
        single = None
    else:
        inner = pipeline.pipeline if isinstance(pipeline, PipelineRunnable) else pipeline
        pieces = {str(_check_pipeline(inner, "pipeline").name): pipeline}
        single = next(iter(pieces))
    steps = {name: _candidate_step(name, piece) for name, piece in pieces.items()}
    if retriever is None:
        owners = [p.pipeline if isinstance(p, PipelineRunnable) else p for p in pieces.values()]
        retriever = next((getattr(p, "retriever", None) for p in owners
                          if getattr(p, "retriever", None) is not None), None)
        if retriever is None:
            raise InvalidInputError("retriever", "is needed: no pipeline has a retriever to "
                                    "take the question's passages from",
                                    "pass the retriever whose top-k passages of the question "
                                    "the candidates are scored against")
    documents = _as_langchain_retriever(retriever, k, router.tm)
    question = RunnableLambda(_pipeline_question, name="question")
    return (
        RunnableParallel(question=question, documents=question | documents)
        | RunnablePassthrough.assign(context=RunnableLambda(_context_of, name="context"))
        | RunnablePassthrough.assign(
            direct_answer=_answer_step(closed_book, QUESTION_ONLY_TEMPLATE, "closed_book"),
            candidates=RunnableParallel(steps).with_config(run_name="candidates"))
        | RunnableLambda(lambda state: _router_input(state, single), name="router_input")
        | router
    ).with_config(run_name="TrustMarginPipelineChain")
