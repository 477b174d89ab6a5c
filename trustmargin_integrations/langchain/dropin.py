"""The drop-in: TrustMargin inserted into a tutorial-shaped RAG chain by one call.

LangChain's RAG tutorial chain is
``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm |
StrOutputParser()``. :func:`with_trustmargin` takes that chain (or its parts) and returns one
with the same input and the same string output: the user's prompt and model answer twice,
with the user's formatted context (RAG) and with an empty one or a closed-book prompt
(Direct), and TrustMargin keeps one of the two full answers.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableBranch,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSequence,
)
from langchain_core.runnables.base import coerce_to_runnable
from pydantic import Field, create_model

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.chains import text_of
from trustmargin_integrations.langchain.decisions import (
    DECISION_EVENT,
    Output,
    decision_payload,
    shape_output,
)
from trustmargin_integrations.langchain.documents import check_documents
from trustmargin_integrations.langchain.router import TrustMarginRouter, as_router
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.validation import check_question

_PARTS_FIX = ("pass the parts instead: with_trustmargin(None, tm, retriever=..., "
              "format_docs=..., prompt=..., llm=...)")


@dataclass
class _Parts:
    """A tutorial-shaped chain taken apart: how the input becomes the question and the
    documents, how documents become the context, and the answering steps."""

    question: Runnable[Any, Any]
    retrieve: Runnable[Any, Any]
    format_docs: Runnable[Any, Any]
    prompt: Runnable[Any, Any]
    answer: Runnable[Any, Any]
    extras: dict[str, Runnable[Any, Any]] = field(default_factory=dict)
    input_key: str | None = None  # None: the input is the question string


def _split_at_retriever(branch: Runnable[Any, Any]
                        ) -> tuple[Runnable[Any, Any], Runnable[Any, Any]]:
    """(steps up to and including the retriever, the formatting steps after it). Without a
    ``BaseRetriever`` in the branch, its last step is taken as the formatter."""
    steps = branch.steps if isinstance(branch, RunnableSequence) else [branch]
    found = [i for i, s in enumerate(steps) if isinstance(s, BaseRetriever)]
    at = found[0] if found else max(len(steps) - 2, 0)
    after = steps[at + 1:]
    return (_chain(steps[:at + 1]),
            _chain(after) if after else RunnableLambda(lambda docs: docs, name="documents"))


def _chain(steps: list[Runnable[Any, Any]]) -> Runnable[Any, Any]:
    return steps[0] if len(steps) == 1 else RunnableSequence(*steps)


def _input_key(branch: Runnable[Any, Any]) -> str | None:
    """The input key an ``itemgetter("key")`` question branch reads (None: another shape)."""
    func = getattr(branch, "func", None)
    if isinstance(func, operator.itemgetter):
        args = func.__reduce__()[1]
        return args[0] if len(args) == 1 and isinstance(args[0], str) else None
    return None


def _parts_of(chain: Any, question_key: str, context_key: str) -> _Parts:
    """The parts of ``{context_key: ... | retriever | format, question_key: ...} | prompt |
    model [| parser]``."""
    steps = chain.steps if isinstance(chain, RunnableSequence) else []
    inputs = steps[0] if steps and isinstance(steps[0], RunnableParallel) else None
    at = next((i for i, s in enumerate(steps) if isinstance(s, BasePromptTemplate)), None)
    if inputs is None or at != 1 or len(steps) < 3:
        raise InvalidInputError("chain", "is not shaped like {'context': retriever | "
                                "format_docs, 'question': RunnablePassthrough()} | prompt | llm",
                                _PARTS_FIX)
    branches = dict(inputs.steps__)
    context, question = branches.pop(context_key, None), branches.pop(question_key, None)
    if context is None or question is None:
        raise InvalidInputError("chain", f"has no '{context_key}' (retrieval) and "
                                f"'{question_key}' branch in its first step",
                                f"name the keys with question_key= and context_key=, or "
                                f"{_PARTS_FIX}")
    retrieve, format_docs = _split_at_retriever(context)
    return _Parts(question=question, retrieve=retrieve, format_docs=format_docs,
                  prompt=steps[1], answer=_chain(steps[2:]), extras=branches,
                  input_key=None if isinstance(question, RunnablePassthrough)
                  else _input_key(question))


def _given_parts(retriever: Any, format_docs: Any, prompt: Any, llm: Any) -> _Parts:
    for name, value in (("retriever", retriever), ("prompt", prompt), ("llm", llm)):
        if not isinstance(value, Runnable):
            raise InvalidInputError(name, f"is a {type(value).__name__}, not a Runnable",
                                    "pass the chain itself, or its LangChain retriever, prompt "
                                    "and model")
    formatter = (RunnableLambda(lambda docs: docs, name="documents") if format_docs is None
                 else coerce_to_runnable(format_docs))
    return _Parts(question=RunnablePassthrough(), retrieve=retriever, format_docs=formatter,
                  prompt=prompt, answer=llm)


def _answer_side(parts: _Parts, prompt: Runnable[Any, Any], name: str) -> Runnable[Any, Any]:
    """The user's prompt and model on the state's prompt variables, as text."""
    return (RunnableLambda(lambda state: state["variables"], name="prompt_variables") | prompt
            | parts.answer | RunnableLambda(text_of, name="to_text")).with_config(run_name=name)


def _decision_step(output: Output) -> Runnable[Decision, Any]:
    """Emit the Decision as a custom event (it is also the router's output in the trace) and
    return what ``output`` asks for."""
    def emit(decision: Decision, config: RunnableConfig) -> Any:
        dispatch_custom_event(DECISION_EVENT, decision_payload(decision), config=config)
        return shape_output(decision, output)

    async def aemit(decision: Decision, config: RunnableConfig) -> Any:
        await adispatch_custom_event(DECISION_EVENT, decision_payload(decision), config=config)
        return shape_output(decision, output)

    return RunnableLambda(emit, afunc=aemit, name="trustmargin_output")


def _gather(parts: _Parts, field_name: str, question_key: str, context_key: str
            ) -> Runnable[Any, dict[str, Any]]:
    """Input -> state: the question (checked before any retrieval, under the user's key),
    the documents, the user's formatted context and the prompt's variables."""
    extras: Runnable[Any, Any] = (RunnableParallel(parts.extras) if parts.extras
                                  else RunnableLambda(lambda _: {}, name="no_extras"))

    def checked(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "checked": check_question(state["question"], field_name)}

    def documents(docs: Any) -> list[Document]:
        return check_documents(docs, f"retriever({field_name})")

    def variables(state: Mapping[str, Any]) -> dict[str, Any]:
        return {**state["extras"], question_key: state["question"],
                context_key: state["context"]}

    return (RunnableParallel(input=RunnablePassthrough(), question=parts.question,
                             extras=extras)
            | RunnableLambda(checked, name="question")
            | RunnablePassthrough.assign(documents=RunnableLambda(lambda s: s["input"])
                                         | parts.retrieve | RunnableLambda(documents))
            | RunnablePassthrough.assign(context=RunnableLambda(lambda s: s["documents"])
                                         | parts.format_docs)
            | RunnablePassthrough.assign(variables=RunnableLambda(variables)))


def _router_input(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"question": state["checked"], "documents": state["documents"],
            "direct_answer": state["direct_answer"], "rag_answer": state["rag_answer"]}


def with_trustmargin(
    chain: Runnable[Any, Any] | None,
    tm: TrustMargin | TrustMarginRouter,
    *,
    retriever: Runnable[Any, Any] | None = None,
    format_docs: Callable[[list[Document]], Any] | Runnable[Any, Any] | None = None,
    prompt: Runnable[Any, Any] | None = None,
    llm: Runnable[Any, Any] | None = None,
    closed_book_prompt: Runnable[Any, Any] | None = None,
    question_key: str = "question",
    context_key: str = "context",
    output: Output = "answer",
) -> Runnable[Any, Any]:
    """Your RAG chain with TrustMargin inserted: same input, same string output.

    ``chain`` is shaped like LangChain's RAG tutorial: ``{"context": retriever | format_docs,
    "question": RunnablePassthrough()} | prompt | llm | StrOutputParser()`` (the question
    branch may be ``itemgetter("question")`` for a dict input, and the first step may carry
    more keys for the prompt). Or pass ``chain=None`` and its parts. The returned chain
    retrieves once, runs *your* prompt and model twice, with *your* formatted context (RAG)
    and with an empty context, or with ``closed_book_prompt`` (Direct), and returns the full
    text of the answer TrustMargin keeps, exactly as your chain produced it.

    The Decision (margins, reason, both answers) is the router's output in the run's trace
    and the :data:`~trustmargin_integrations.langchain.decisions.DECISION_EVENT` custom event;
    ``output="decision"`` returns it instead of the text. The input and output types are set,
    so ``chain.as_tool()`` works. When nothing is retrieved the RAG side is skipped and the
    closed-book answer is returned (reason ``no_evidence``).

    Args:
        chain: your tutorial-shaped chain, or None to build from the parts below.
        tm: the arbiter (its model scores both answers), or a :class:`TrustMarginRouter`.
        retriever, format_docs, prompt, llm: the parts, when ``chain`` is None; ``llm`` may
            be ``model | parser``. ``format_docs`` defaults to passing the documents as is.
        closed_book_prompt: the prompt of the Direct side (default: your prompt with an
            empty context); it gets the same variables.
        question_key, context_key: the keys of your first step (and prompt variables).
        output: ``"answer"`` (the chosen text) or ``"decision"`` (the Decision).

    Raises:
        InvalidInputError: at build time for a chain of another shape (``chain``) or missing
            parts; at call time for a blank question (named by your key) or a retriever that
            returns something other than Documents (``retriever(question)[j]``).
    """
    parts = (_given_parts(retriever, format_docs, prompt, llm) if chain is None
             else _parts_of(chain, question_key, context_key))
    router = as_router(tm)
    field_name = parts.input_key or question_key
    direct_prompt = parts.prompt if closed_book_prompt is None else closed_book_prompt

    def closed_book(state: Mapping[str, Any]) -> dict[str, Any]:
        return {**state, "variables": {**state["variables"], context_key: ""}}

    answers = RunnablePassthrough.assign(
        direct_answer=RunnableLambda(closed_book, name="empty_context")
        | _answer_side(parts, direct_prompt, "closed_book"),
        rag_answer=RunnableBranch(
            (RunnableLambda(lambda s: not s["documents"], name="no_documents?"),
             RunnableLambda(lambda _: None, name="no_documents")),
            _answer_side(parts, parts.prompt, "rag")))
    built = (_gather(parts, field_name, question_key, context_key) | answers
             | RunnableLambda(_router_input, name="router_input")
             | router.model_copy(update={"output": "decision"}) | _decision_step(output))
    return built.with_types(input_type=_input_type(parts),
                            output_type=cast(Any, str if output == "answer" else Decision)
                            ).with_config(run_name="TrustMarginChain")


def _input_type(parts: _Parts) -> Any:
    """``str`` for a question-string chain; a one-field record for ``itemgetter(key)``."""
    if isinstance(parts.question, RunnablePassthrough):
        return str
    if parts.input_key is None:
        return dict[str, Any]
    return create_model("TrustMarginChainInput",
                        **{parts.input_key: (str, Field(description="The user's question."))})
