"""Multi-step RAG pipelines (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as Runnables, and the chain
that arbitrates a pipeline's answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.language_models import BaseLanguageModel
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSerializable,
)
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.chains import answer_step, context_of, retrieval_step
from trustmargin_integrations.langchain.inputs import (
    check_pipeline,
    pipeline_question,
    positional,
)
from trustmargin_integrations.langchain.retrievers import as_langchain_retriever
from trustmargin_integrations.langchain.router import TrustMarginRouter, as_router
from trustmargin_integrations.prompts import QUESTION_CONTEXT_TEMPLATE, QUESTION_ONLY_TEMPLATE
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.validation import TypedFields, check_k

PIPELINE_EVENT = "trustmargin_pipeline"
"""Name of the custom callback event each pipeline run emits with its trace
(``PipelineResult.to_metadata()``)."""


PIPELINE_KEY = "pipeline"
"""``Decision.metadata`` key of the trace when one pipeline gives the RAG-side answer."""


PIPELINES_KEY = "pipelines"
"""``Decision.metadata`` key of the traces (name -> trace) when several candidates compete."""


class PipelineRunnable(TypedFields, RunnableSerializable[Any, Any]):
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

    def __init__(self, pipeline: Any = None, /, **kwargs: Any) -> None:
        given = positional("pipeline", pipeline, kwargs)
        super().__init__(**{**given, "pipeline": check_pipeline(given.get("pipeline"),
                                                                "pipeline")})

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
                ready.append((i, pipeline_question(value, f"inputs[{i}]" if batched else None)))
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


def _candidate_step(name: str, piece: Any) -> Runnable[Any, Any]:
    """One RAG-side candidate over the chain's state ``{question, documents, context}``: a
    pipeline answers from the question alone, a chain or model from the question's
    documents (a bare model gets the paper's question+context prompt: BM25-RAG)."""
    if isinstance(piece, Runnable) and not isinstance(piece, PipelineRunnable):
        return answer_step(piece, QUESTION_CONTEXT_TEMPLATE, name)
    runnable = piece if isinstance(piece, PipelineRunnable) else PipelineRunnable(
        check_pipeline(piece, f"pipeline[{name!r}]"))
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
    tm: TrustMargin | TrustMarginRouter,
    *,
    retriever: Runnable[str, list[Document]] | Retriever | None = None,
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
        tm: the arbiter (its model scores), or the :class:`TrustMarginRouter` that decides.
        retriever: the evidence pool: a LangChain retriever or a project retriever. None:
            the pipeline's own retriever (for a mapping, the first pipeline's).
        closed_book: a chain reading ``{"question"}`` or a bare model for the Direct answer;
            None lets the scorer model generate it (the paper's same-model setting).
        k: passages per question from a project retriever (default ``tm.config.top_k``).

    Returns:
        A Runnable from the question (str or ``{"question": ...}``) to a ``Decision``.

    Raises:
        InvalidInputError: (``pipeline``, ``pipeline['name']``, ``tm``, ``retriever``, ``k``)
            at build time; (``question``) at call time for a missing or blank question.
    """
    router = as_router(tm)
    if k is not None:
        check_k(k)
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
        pieces = {str(check_pipeline(inner, "pipeline").name): pipeline}
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
    documents = as_langchain_retriever(retriever, k, router.tm)
    question = RunnableLambda(pipeline_question, name="question")
    return (
        RunnableParallel(question=question, documents=retrieval_step(question, documents))
        | RunnablePassthrough.assign(context=RunnableLambda(context_of, name="context"))
        | RunnablePassthrough.assign(
            direct_answer=answer_step(closed_book, QUESTION_ONLY_TEMPLATE, "closed_book"),
            candidates=RunnableParallel(steps).with_config(run_name="candidates"))
        | RunnableLambda(lambda state: _router_input(state, single), name="router_input")
        | router
    ).with_config(run_name="TrustMarginPipelineChain")
