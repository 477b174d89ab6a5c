"""The chain builder: retrieve, answer both ways, route."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSerializable,
)
from langchain_core.runnables.utils import ConfigurableFieldSpec
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.documents import check_documents, document_to_passage
from trustmargin_integrations.langchain.inputs import question_of
from trustmargin_integrations.langchain.retrievers import (
    DocumentSearch,
    as_langchain_retriever,
    as_project_retriever,
)
from trustmargin_integrations.langchain.router import (
    CONFIG_SPECS,
    MARGINS_EVENT,
    TrustMarginRouter,
    as_router,
    margins_payload,
)
from trustmargin_integrations.prompts import (
    QUESTION_CONTEXT_TEMPLATE,
    QUESTION_ONLY_TEMPLATE,
    join_passages,
)
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Decision


class _CorePipeline(RunnableSerializable[str, Decision]):
    """The core's whole pipeline as one chain step: ``TrustMargin.answer_batch``.

    The scorer model retrieves, generates both candidates and arbitrates; a batch of
    questions is one ``answer_batch`` call, each question decided by its config's policy.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = Field(description="A project retriever, or a LangChain retriever.")
    k: int | None = Field(None, description="Passages per question (None: tm.config.top_k).")
    router: TrustMarginRouter

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return list(CONFIG_SPECS)

    def _run(self, questions: list[str], config: list[RunnableConfig]) -> list[Decision]:
        policies = [self.router.call_policy(cfg) for cfg in config]
        search: Retriever = (DocumentSearch(self.retriever, config)
                             if isinstance(self.retriever, Runnable) else self.retriever)
        return self.router.tm.answer_batch(questions, search, self.k,
                                           include_prompts=self.router.include_prompts,
                                           policy=policies)

    def _report(self, questions: list[str], config: list[RunnableConfig]) -> list[Decision]:
        decisions = self._run(questions, config)
        for decision, cfg in zip(decisions, config, strict=True):
            dispatch_custom_event(MARGINS_EVENT, margins_payload(decision), config=cfg)
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


def text_of(value: Any) -> str | None:
    """A candidate step's output as text (a chat model's message gives its text)."""
    if isinstance(value, BaseMessage):
        return value.text
    if value is None or isinstance(value, str):
        return value
    raise InvalidInputError("answer", f"a candidate chain returned a {type(value).__name__}",
                            "end the closed-book and RAG chains with a string or a message")


def answer_step(piece: Runnable[Any, Any] | BaseLanguageModel[Any] | None, template: str,
                 name: str) -> Runnable[Any, str | None]:
    """One candidate's step: a chain as given, a bare model behind ``template``, or None (the
    router's scorer model generates that side); its output is text."""
    if piece is None:
        # None reaches the router as a missing candidate: its scorer model generates it.
        return RunnableLambda(lambda _: None, name=f"{name}_by_scorer")
    step: Runnable[Any, Any] = piece
    if isinstance(piece, BaseLanguageModel):
        # A bare model gets the paper's appendix prompt, so its answers are short phrases.
        step = PromptTemplate.from_template(template) | piece
    # No cleaning here: the core cleans every candidate and records what it changed.
    return (step | RunnableLambda(text_of, name="to_text")).with_config(run_name=name)


def retrieval_step(question: Runnable[Any, str], retriever: Runnable[str, Any]
                   ) -> Runnable[Any, list[Document]]:
    """question -> the retriever's documents, refused by name unless they are Documents (a
    retriever returning strings or tuples would otherwise fail deep inside with an
    AttributeError)."""
    return question | retriever | RunnableLambda(
        lambda docs: check_documents(docs, "retriever(question)"), name="check_documents")


def context_of(value: Mapping[str, Any]) -> str:
    """The state's documents as the paper's ``Passage i: title: text`` lines."""
    return join_passages([document_to_passage(d).as_context() for d in value["documents"]])


def no_documents(value: Mapping[str, Any]) -> bool:
    """True when the retriever found nothing (the RAG step is then skipped)."""
    return not value["documents"]


def build_trustmargin_chain(
    retriever: Runnable[str, list[Document]] | Retriever,
    tm: TrustMargin | TrustMarginRouter,
    *,
    closed_book: Runnable[Any, Any] | BaseLanguageModel[Any] | None = None,
    rag: Runnable[Any, Any] | BaseLanguageModel[Any] | None = None,
    k: int | None = None,
) -> Runnable[Any, Decision]:
    """The full chain: retrieve -> both answers -> route, from the question to a Decision.

    Arguments follow the package's one style: what is wrapped (the retriever) and the arbiter
    positionally, everything else by name.

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
        tm: the arbiter (its model scores), or the :class:`TrustMarginRouter` that decides.
        k: passages per question for a project retriever (default ``tm.config.top_k``) or a
            :class:`TrustMarginRetriever` (default its own ``k``).

    Returns:
        A Runnable from the question (str or ``{"question": ...}``) to a ``Decision``.

    Raises:
        InvalidInputError: ``tm`` is neither a TrustMargin nor a router.
    """
    router = as_router(tm)
    question = RunnableLambda(question_of, name="question")
    if closed_book is None and rag is None:
        search, passages = as_project_retriever(retriever, k)
        pipeline = _CorePipeline(retriever=search, k=passages, router=router)
        return (question | pipeline.with_config(run_name="trustmargin_answer")
                ).with_config(run_name="TrustMarginChain")
    documents = as_langchain_retriever(retriever, k, router.tm)
    skip_rag: RunnableLambda[Any, None] = RunnableLambda(lambda _: None, name="no_documents")
    return (
        RunnableParallel(question=question, documents=retrieval_step(question, documents))
        | RunnablePassthrough.assign(context=RunnableLambda(context_of, name="context"))
        | RunnablePassthrough.assign(
            direct_answer=answer_step(closed_book, QUESTION_ONLY_TEMPLATE, "closed_book"),
            rag_answer=RunnableBranch(
                (RunnableLambda(no_documents, name="no_documents?"), skip_rag),
                answer_step(rag, QUESTION_CONTEXT_TEMPLATE, "rag")),
        )
        | router
    ).with_config(run_name="TrustMarginChain")


