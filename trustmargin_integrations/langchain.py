"""LangChain adapter: a router Runnable, a BM25 retriever, a local LLM and a chain builder.

The adapter is thin. It turns LangChain inputs (dicts, ``Document`` objects, chat messages)
into the core's :class:`~trustmargin_integrations.schema.ArbitrationInput` and returns the
core :class:`~trustmargin_integrations.schema.Decision` unchanged; all scoring happens in
:class:`~trustmargin_integrations.arbiter.TrustMargin`.

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

from langchain_core.callbacks import CallbackManagerForLLMRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.language_models import LLM, BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import Generation, LLMResult
from langchain_core.prompts import PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSerializable,
)
from langchain_core.runnables.config import run_in_executor
from pydantic import BaseModel, ConfigDict, Field

from trustmargin_integrations.answers import clean_answer
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import (
    QUESTION_CONTEXT_TEMPLATE,
    QUESTION_ONLY_TEMPLATE,
    join_passages,
)
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.schema import Decision

__all__ = [
    "BM25Retriever",
    "LocalLLM",
    "TrustMarginInput",
    "TrustMarginRouter",
    "build_trustmargin_chain",
    "document_to_passage",
    "to_core_input",
]

_REQUIRED_KEYS = ("question", "direct_answer", "rag_answer")
_FIX_SHAPE = ("pass a dict with 'question', 'direct_answer', 'rag_answer' and either "
              "'documents' (list of Document) or 'context' (str or list of str)")


class TrustMarginInput(BaseModel):
    """What :class:`TrustMarginRouter` reads from each input dict.

    ``direct_answer`` and ``rag_answer`` are required keys; an explicit ``None`` asks the
    router's local model to generate that candidate. The evidence is ``documents``
    (LangChain ``Document`` objects, e.g. a retriever's output) or, when there are no
    documents, ``context`` (passage strings; a single string counts as one passage).
    When both are present ``documents`` is used, so a chain may keep a formatted
    ``context`` string for its RAG prompt next to the documents. Other keys are ignored.
    """

    model_config = ConfigDict(extra="ignore", arbitrary_types_allowed=True)

    question: str = Field(description="The user's question.")
    direct_answer: str | None = Field(description="Closed-book answer; None = generate it.")
    rag_answer: str | None = Field(description="Retrieval-augmented answer; None = generate it.")
    documents: list[Document] | None = Field(None, description="Retrieved documents, in order.")
    context: str | list[str] | None = Field(None, description="Passages, when no documents.")
    id: str | None = Field(None, description="Caller's identifier, copied to the Decision.")


def document_to_passage(doc: Document) -> str:
    """The passage text the scorer sees for a document: ``title: text`` when titled.

    The title (``metadata["title"]``) is kept because the core's own BM25 path scores
    ``Passage.as_context()``, which prefixes it; documents from :class:`BM25Retriever`
    therefore score exactly as the core scores the same passages.
    """
    title = doc.metadata.get("title")
    if isinstance(title, str) and title.strip():
        return f"{title}: {doc.page_content}"
    return doc.page_content


def _check_answer(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw[key]
    if value is not None and not isinstance(value, str):
        raise InvalidInputError(key, f"must be a string or None, got {type(value).__name__}",
                                "pass the candidate's text (use StrOutputParser after a chat "
                                "model), or None to let the router's model generate it")
    return value


def _passages_from_documents(docs: Any) -> list[str]:
    if isinstance(docs, (str, bytes, Document)) or not isinstance(docs, Sequence):
        raise InvalidInputError("documents", f"must be a list of Document, got "
                                f"{type(docs).__name__}",
                                "pass the retriever's output (a list of Document)")
    passages = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, Document):
            raise InvalidInputError(f"documents[{i}]", f"must be a Document, got "
                                    f"{type(doc).__name__}",
                                    "pass langchain_core.documents.Document objects, or "
                                    "strings under 'context'")
        if not doc.page_content.strip():
            raise InvalidInputError(f"documents[{i}].page_content", "is empty",
                                    "drop empty documents before routing")
        passages.append(document_to_passage(doc))
    if not passages:
        raise InvalidInputError("documents", "is empty (no passage was retrieved)",
                                "retrieve at least one document; without evidence there is "
                                "nothing to arbitrate, so use the direct answer as is")
    return passages


def _passages_from_context(context: Any) -> list[str]:
    if isinstance(context, str):
        context = [context]
    if not isinstance(context, Sequence) or isinstance(context, bytes):
        raise InvalidInputError("context", f"must be a string or a list of strings, got "
                                f"{type(context).__name__}",
                                "pass passage texts, or Document objects under 'documents'")
    passages = []
    for i, text in enumerate(context):
        if not isinstance(text, str):
            raise InvalidInputError(f"context[{i}]", f"must be a string, got "
                                    f"{type(text).__name__}",
                                    "pass passage texts, or Document objects under 'documents'")
        if not text.strip():
            raise InvalidInputError(f"context[{i}]", "is empty", "drop empty passages")
        passages.append(text)
    if not passages:
        raise InvalidInputError("context", "is empty (no passage was given)",
                                "give at least one passage; without evidence there is "
                                "nothing to arbitrate")
    return passages


def to_core_input(value: Any) -> dict[str, Any]:
    """Validate one router input and translate it to the core's input mapping.

    Raises:
        InvalidInputError: naming the missing or wrongly typed key.
    """
    if isinstance(value, TrustMarginInput):
        raw: Mapping[str, Any] = {k: getattr(value, k) for k in TrustMarginInput.model_fields
                                  if k in value.model_fields_set or k in _REQUIRED_KEYS}
    elif isinstance(value, Mapping):
        raw = value
    else:
        raise InvalidInputError("input", f"is a {type(value).__name__}, not a dict", _FIX_SHAPE)
    for key in _REQUIRED_KEYS:
        if key not in raw:
            fix = ("add the user's question" if key == "question" else
                   f"add '{key}' (None lets the router's model generate it)")
            raise InvalidInputError(key, "is missing", fix)
    question = raw["question"]
    if not isinstance(question, str):
        raise InvalidInputError("question", f"must be a string, got {type(question).__name__}",
                                "pass the user's question as text")
    if not question.strip():
        raise InvalidInputError("question", "is empty", "pass a non-empty question")
    if raw.get("documents") is not None:
        passages = _passages_from_documents(raw["documents"])
    elif raw.get("context") is not None:
        passages = _passages_from_context(raw["context"])
    else:
        raise InvalidInputError("documents", "is missing (and so is 'context')",
                                "add the retrieved documents under 'documents', or passage "
                                "strings under 'context'")
    ident = raw.get("id")
    return {
        "question": question,
        "passages": passages,
        "direct_answer": _check_answer(raw, "direct_answer"),
        "rag_answer": _check_answer(raw, "rag_answer"),
        "id": None if ident is None else str(ident),
    }


class TrustMarginRouter(RunnableSerializable[TrustMarginInput, Decision]):
    """Route between a closed-book and a RAG answer with TrustMargin.

    Input: a dict shaped like :class:`TrustMarginInput`. Output: the core
    :class:`~trustmargin_integrations.schema.Decision`, so ``.answer`` is one attribute
    away and the margins (``m_prior``, ``m_bind``, ``m``) travel with it.

    ``batch``/``abatch`` send all valid inputs to the scorer in one
    ``TrustMargin.arbitrate_batch`` call. Each input still gets its own traced run
    (name, tags, metadata and callbacks from ``config``) whose output is its Decision.

    Example:
        >>> router = TrustMarginRouter(tm=TrustMargin.from_pretrained())  # doctest: +SKIP
        >>> router.invoke({"question": "Who wrote Hamlet?", "direct_answer": "Shakespeare",
        ...                "rag_answer": "Marlowe", "context": ["Hamlet ..."]})  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tm: TrustMargin = Field(description="The arbiter; its backend is the scorer model.")
    include_prompts: bool | None = Field(
        None, description="Attach rendered prompts to each Decision (None: tm.config's value).")

    @property
    def InputType(self) -> type[TrustMarginInput]:  # noqa: N802 (LangChain's name)
        """The typed input record."""
        return TrustMarginInput

    @property
    def OutputType(self) -> type[Decision]:  # noqa: N802 (LangChain's name)
        """The core Decision."""
        return Decision

    # -- core call: a list of raw inputs -> a list of Decisions or per-input errors ---------

    def _route(self, values: list[Any], fail_fast: bool = True) -> list[Decision | Exception]:
        out: list[Decision | Exception | None] = [None] * len(values)
        ready: list[tuple[int, dict[str, Any]]] = []
        for i, value in enumerate(values):
            try:
                ready.append((i, to_core_input(value)))
            except InvalidInputError as exc:
                if fail_fast:
                    raise
                out[i] = exc
        if ready:
            try:
                decisions = self._arbitrate([item for _, item in ready])
            except InvalidInputError:
                if fail_fast:
                    raise
                # Rare (e.g. a question of control characters only): find the culprits
                # with the core's own validation, then score the rest in one call.
                good = []
                for i, item in ready:
                    try:
                        self.tm.prepare(item)
                        good.append((i, item))
                    except InvalidInputError as exc:
                        out[i] = exc
                ready = good
                decisions = self._arbitrate([item for _, item in ready])
            for (i, _), decision in zip(ready, decisions, strict=True):
                out[i] = decision
        return [cast("Decision | Exception", o) for o in out]

    def _arbitrate(self, items: list[dict[str, Any]]) -> list[Decision]:
        return self.tm.arbitrate_batch(items, include_prompts=self.include_prompts)

    def _route_one(self, value: Any) -> Decision:
        result = self._route([value])[0]
        if isinstance(result, Exception):  # pragma: no cover - fail_fast raises instead
            raise result
        return result

    async def _aroute_one(self, value: Any) -> Decision:
        return await run_in_executor(None, self._route_one, value)

    async def _aroute(self, values: list[Any], fail_fast: bool = True
                      ) -> list[Decision | Exception]:
        return await run_in_executor(None, self._route, values, fail_fast)

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
        """Arbitrate many inputs with one ``arbitrate_batch`` call (not a thread per input)."""
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


class BM25Retriever(BaseRetriever):
    """A LangChain retriever over the embedded :class:`BM25Index`.

    Each ``Document`` carries the passage text as ``page_content`` and ``id``, ``title``,
    ``score`` (BM25) plus the passage's own metadata in ``metadata``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: BM25Index
    k: int = Field(4, ge=1, description="Documents returned per query.")

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        return [
            Document(page_content=p.text, id=p.id,
                     metadata={**p.metadata, "id": p.id, "title": p.title, "score": p.score})
            for p in self.index.search(query, self.k)
        ]


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
    if isinstance(value, str):
        question = value
    elif isinstance(value, Mapping) and "question" in value:
        question = value["question"]
    else:
        raise InvalidInputError("question", "is missing",
                                "invoke the chain with the question string or {'question': ...}")
    if not isinstance(question, str) or not question.strip():
        raise InvalidInputError("question", "must be a non-empty string",
                                "invoke the chain with the question text")
    return question


def _text_of(value: Any) -> str:
    if isinstance(value, BaseMessage):
        return value.text
    if isinstance(value, str):
        return value
    raise InvalidInputError("answer", f"a candidate chain returned a {type(value).__name__}",
                            "end the closed-book and RAG chains with a string or a message")


def _answer_step(piece: Runnable[Any, Any] | BaseLanguageModel[Any], template: str,
                 clean: bool, name: str) -> Runnable[Any, str]:
    step: Runnable[Any, Any] = piece
    if isinstance(piece, BaseLanguageModel):
        # A bare model gets the paper's appendix prompt, so its answers are short phrases.
        step = PromptTemplate.from_template(template) | piece
    finish = (lambda v: clean_answer(_text_of(v))) if clean else _text_of
    return (step | RunnableLambda(finish, name="to_answer")).with_config(run_name=name)


def _context_of(value: Mapping[str, Any]) -> str:
    return join_passages([document_to_passage(d) for d in value["documents"]])


def build_trustmargin_chain(
    retriever: Runnable[str, list[Document]],
    closed_book: Runnable[Any, Any] | BaseLanguageModel[Any],
    rag: Runnable[Any, Any] | BaseLanguageModel[Any],
    router: TrustMarginRouter,
    *,
    clean_answers: bool = True,
) -> Runnable[Any, Decision]:
    """The full LCEL chain: retrieve -> both answers in parallel -> route.

    Args:
        retriever: returns ``Document`` objects for the question string.
        closed_book: a chain reading ``{"question"}`` (e.g. ``prompt | llm | parser``), or a
            bare LLM/chat model, which gets the paper's question-only prompt.
        rag: a chain reading ``{"question", "context", "documents"}`` where ``context`` is
            the documents joined as ``Passage i: ...`` lines, or a bare model, which gets the
            paper's question+context prompt.
        router: the :class:`TrustMarginRouter` that makes the decision.
        clean_answers: cut each answer to its first line and drop ``Answer:`` labels (the
            short-answer form the margins are defined on).

    Returns:
        A Runnable from the question (str or ``{"question": ...}``) to a ``Decision``.
    """
    question = RunnableLambda(_question_of, name="question")
    return (
        RunnableParallel(question=question, documents=question | retriever)
        | RunnablePassthrough.assign(context=RunnableLambda(_context_of, name="context"))
        | RunnablePassthrough.assign(
            direct_answer=_answer_step(closed_book, QUESTION_ONLY_TEMPLATE, clean_answers,
                                       "closed_book"),
            rag_answer=_answer_step(rag, QUESTION_CONTEXT_TEMPLATE, clean_answers, "rag"),
        )
        | router
    ).with_config(run_name="TrustMarginChain")
