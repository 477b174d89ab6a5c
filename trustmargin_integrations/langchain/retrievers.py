"""LangChain retrievers over project retrievers and pipelines, and a LangChain retriever
seen as a project retriever."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import ConfigDict, Field, field_validator

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.documents import (
    check_documents,
    document_to_passage,
    passage_to_document,
)
from trustmargin_integrations.langchain.inputs import (
    check_pipeline,
    pipeline_question,
    positional,
)
from trustmargin_integrations.retrieval.base import retrieve_batch
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.validation import (
    TypedFields,
    check_k,
    check_question,
    check_retriever,
)


class TrustMarginRetriever(TypedFields, BaseRetriever):
    """A LangChain retriever over any project retriever.

    ``retriever`` (positional or by name) is anything with ``search(query, k) ->
    list[Passage]``: the embedded :class:`~trustmargin_integrations.retrieval.bm25.BM25Index`,
    an :class:`~trustmargin_integrations.retrieval.elasticsearch.ElasticsearchRetriever`, or
    your own. ``k`` is the default number of documents; ``invoke(query, k=1)`` overrides it
    for one call. Each ``Document`` carries ``id`` and the metadata described in
    :func:`passage_to_document`. A bad argument is an ``InvalidInputError`` naming it.

    Example:
        >>> retriever = TrustMarginRetriever(BM25Index.build(passages), k=4)
        ... # doctest: +SKIP
        >>> retriever.invoke("Who designed the Velmora Bridge?", k=1)  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any = Field(description="A project retriever: search(query, k) -> Passages.")
    k: int = Field(4, description="Documents returned per query (invoke(q, k=...) overrides it "
                                  "for one call).")

    def __init__(self, retriever: Any = None, /, **kwargs: Any) -> None:
        super().__init__(**positional("retriever", retriever, kwargs))

    @field_validator("retriever")
    @classmethod
    def _searchable(cls, value: Any) -> Any:
        return check_retriever(value)

    @field_validator("k")
    @classmethod
    def _positive(cls, value: Any) -> int:
        return check_k(value)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        # Checked here so a blank query is named as the caller's argument, not queries[0].
        query = check_question(query, "query")
        # retrieve_batch is the core's retrieval stage: it checks k and that hits are Passages.
        hits = retrieve_batch(self.retriever, [query], self.k if k is None else k)[0]
        return [passage_to_document(p) for p in hits]


class DocumentSearch:
    """A LangChain retriever seen as a project retriever, for the core's pipeline.

    LangChain retrievers have no portable ``k`` argument, so ``k`` keeps the first ``k``
    documents of what the retriever returns.
    """

    def __init__(self, runnable: Runnable[str, list[Document]],
                 config: RunnableConfig | list[RunnableConfig]) -> None:
        self.runnable = runnable
        self.config = config

    def search(self, query: str, k: int) -> list[Passage]:
        """The first ``k`` documents for ``query``, as Passages."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """One ``runnable.batch`` call for all queries (under one config, or one per query);
        a non-Document hit is refused."""
        rows = self.runnable.batch(list(queries), self.config)
        return [[document_to_passage(d) for d in
                 check_documents(docs, f"retriever(questions[{i}])")[:k]]
                for i, docs in enumerate(rows)]


def as_langchain_retriever(retriever: Any, k: int | None, tm: TrustMargin
                           ) -> Runnable[str, list[Document]]:
    """``retriever`` as a LangChain retriever: a project retriever is wrapped in
    :class:`TrustMarginRetriever` with ``k`` (default ``tm.config.top_k``)."""
    if k is not None:
        check_k(k)
    if isinstance(retriever, TrustMarginRetriever):
        return retriever if k is None else retriever.model_copy(update={"k": k})
    if isinstance(retriever, Runnable):
        if k is not None:
            raise InvalidInputError("k", "cannot be applied to this LangChain retriever",
                                    "set the number of documents on the retriever itself")
        return retriever
    return TrustMarginRetriever(retriever=_searchable(retriever),
                                k=tm.config.top_k if k is None else k)


def as_project_retriever(retriever: Any, k: int | None) -> tuple[Any, int | None]:
    """``retriever`` and ``k`` for the core's pipeline (a LangChain retriever stays as is;
    :class:`TrustMarginRetriever` gives back its project retriever and its own ``k``)."""
    if isinstance(retriever, TrustMarginRetriever):
        return retriever.retriever, retriever.k if k is None else k
    if isinstance(retriever, Runnable):
        return retriever, k
    return _searchable(retriever), k


def _searchable(retriever: Any) -> Any:
    """A project retriever, or an error that also names the LangChain option."""
    try:
        return check_retriever(retriever)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.field, f"{exc.problem} and is not a LangChain retriever",
                                "pass a LangChain retriever, or " + exc.fix) from None


class PipelineRetriever(TypedFields, BaseRetriever):
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

    def __init__(self, pipeline: Any = None, /, **kwargs: Any) -> None:
        given = positional("pipeline", pipeline, kwargs)
        super().__init__(**{**given, "pipeline": check_pipeline(given.get("pipeline"),
                                                                "pipeline")})

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        result = self.pipeline.run(pipeline_question(query))
        docs = [passage_to_document(p) for p in result.passages]
        for doc in docs:
            doc.metadata["pipeline"] = result.pipeline
        return docs


