"""What the adapter reads from LangChain inputs, and errors that name the user's own keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.documents import Document
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, field_validator

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.documents import document_to_passage
from trustmargin_integrations.validation import check_question

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


class TrustMarginInput(BaseModel):
    """What :class:`TrustMarginRouter` reads from each input dict; the router parses every
    input with this model.

    ``direct_answer`` and ``rag_answer`` are required keys; an explicit ``None`` asks the
    router's local model to generate that candidate. The evidence is ``documents``
    (LangChain ``Document`` objects, e.g. a retriever's output, or their dict form) or, when
    there are no documents, ``context`` (passage strings; a single string counts as one
    passage). An empty list, or an empty (or blank) ``context`` string, means nothing was
    retrieved: the decision is the closed-book answer with reason ``no_evidence``. When both
    are present ``documents`` is used, so a chain may keep a formatted ``context`` string for
    its RAG prompt next to the documents.

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


def core_input(value: Any, where: str | None) -> tuple[dict[str, Any], dict[str, str]]:
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
        # A blank context string is what a format_docs step makes of no documents: nothing
        # was retrieved, like an empty list (a blank entry in a list is still refused).
        if isinstance(record.context, str):
            passages = [record.context] if record.context.strip() else []
        else:
            passages = record.context
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


def question_of(value: Any) -> str:
    """The question of a chain input: the string itself or ``value["question"]``."""
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


def positional(name: str, value: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the first argument of a pydantic Runnable's constructor, which may come
    positionally (``TrustMarginRouter(tm)``) or by name (``TrustMarginRouter(tm=tm)``)."""
    if value is None:
        return kwargs
    if name in kwargs:
        raise InvalidInputError(name, "is given twice (positionally and by name)",
                                f"pass {name} once")
    return {name: value, **kwargs}


def check_pipeline(value: Any, field: str) -> Any:
    """``value`` when it behaves like a project pipeline (name, run, run_batch)."""
    if not (isinstance(getattr(value, "name", None), str) and callable(getattr(value, "run", None))
            and callable(getattr(value, "run_batch", None))):
        raise InvalidInputError(field, f"a {type(value).__name__} is not a pipeline (it needs "
                                "name, run(question) and run_batch(questions))",
                                "pass a pipeline from trustmargin_integrations.pipelines, e.g. "
                                "build_pipeline('ircot', tm.backend, index, k=3)")
    return value


def pipeline_question(value: Any, where: str | None = None) -> str:
    """The question of a chain or pipeline input; a blank one is refused before any model
    call (a pipeline would otherwise spend its steps on it)."""
    try:
        question = check_question(question_of(value))
    except InvalidInputError as exc:
        if where is None:
            raise
        raise InvalidInputError(f"{where}.{exc.field}", exc.problem, exc.fix) from None
    return question

