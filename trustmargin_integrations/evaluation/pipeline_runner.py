"""TrustMargin on top of other RAG pipelines (the paper's complementarity table), resumable.

Each extra pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) answers every evaluated question on
the same model; its answer is arbitrated as the RAG candidate against the main run's Direct
answer over the same top-k passages the BM25-RAG decision was scored with (why:
docs/decisions.md), its trace stored under the Decision's ``metadata["pipeline"]``. Results are
cached a batch at a time. The pipelines search the dataset's shipped passages as a BM25 corpus
by default, or any corpus file given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.records import (
    EvalRecord,
    PipelineRecord,
    pipeline_value,
    read_pipeline_record,
)
from trustmargin_integrations.evaluation.runner import (
    example_key,
    settings_for,
    short_answer_arbiter,
)
from trustmargin_integrations.pipelines import PIPELINES, build_pipeline
from trustmargin_integrations.resumable import run_chunks
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.store import ResultStore

__all__ = ["BASELINE", "PipelineRecord", "first_of_each_type", "parse_pipelines",
           "run_pipeline"]

T = TypeVar("T")

BASELINE = "bm25"
"""The main run's own RAG candidate (BM25-RAG), always part of a complementarity table."""


def first_of_each_type(items: Sequence[T], limit: int | None,
                       type_of: Callable[[T], str]) -> list[T]:
    """The first ``limit`` items, taken in turn from each question type (input order within a
    type), so a short pipeline run keeps the types as balanced as the whole set: 2Wiki's 480
    questions are 240 + 240, but its first 40 by id are 25 compositional and 15 comparison.
    ``None`` keeps them all, in input order."""
    if limit is None:
        return list(items)
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(type_of(item), []).append(item)
    turns = [group[i] for i in range(max(map(len, groups.values()), default=0))
             for group in groups.values() if i < len(group)]
    return turns[:limit]


def parse_pipelines(spec: str) -> list[str]:
    """``"bm25,ircot,flare"`` -> the extra pipelines to run (``bm25`` is the main run)."""
    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n != BASELINE and n not in PIPELINES]
    if unknown:
        raise InvalidInputError("--pipeline", f"unknown pipeline(s) {', '.join(unknown)}",
                                "use a comma-separated list of "
                                f"{[BASELINE, *sorted(PIPELINES)]}")
    return list(dict.fromkeys(n for n in names if n != BASELINE))


def run_pipeline(
    tm: TrustMargin,
    records: Sequence[EvalRecord],
    store: ResultStore,
    *,
    name: str,
    retriever: Retriever,
    top_k: int,
    params: Mapping[str, Any] | None = None,
    dtype: str | None = None,
    batch_size: int | None = None,
    progress: bool = True,
) -> list[PipelineRecord]:
    """Run pipeline ``name`` on the main run's ``records`` and arbitrate each answer.

    Args:
        tm: the arbiter whose backend also runs the pipeline (one model, as in the paper).
        records: the main run's records (they hold the Direct answer and the passages).
        store: the run's cache.
        name: a name of :data:`~trustmargin_integrations.pipelines.PIPELINES`.
        retriever: what the pipeline searches with its own queries.
        top_k: recorded in the cache key with the run's other settings.
        params: the pipeline's parameters (its defaults when omitted).
        batch_size: questions per durable batch.
    """
    pipeline = build_pipeline(name, tm.backend, retriever, **dict(params or {}))
    settings = settings_for(tm, top_k=top_k, dtype=dtype, retrieval="pipeline").as_dict()
    keyed = {**settings, "pipeline": name, "pipeline_params": pipeline.params()}
    keys = [example_key(tm, keyed, rec.example.question, rec.passages,
                        rec.decision.direct_answer) for rec in records]

    # The pipelines' answers and the run's Direct answers are short answers of the product's
    # own prompts: scored whole, as the paper scores its answers, not compared as a chain's
    # chat texts.
    short = short_answer_arbiter(tm)

    def run_and_arbitrate(chunk: Sequence[int]) -> list[dict[str, Any]]:
        results = pipeline.run_batch([records[i].example.question for i in chunk])
        decisions = short.arbitrate_batch([
            {"question": records[i].example.question, "passages": list(records[i].passages),
             "direct_answer": records[i].decision.direct_answer,
             "rag_answer": result.answer,
             "id": f"{records[i].example.dataset}:{records[i].example.id}",
             "metadata": {"pipeline": result.to_metadata()}}
            for i, result in zip(chunk, results, strict=True)])
        return [pipeline_value(decision, result.seconds)
                for result, decision in zip(results, decisions, strict=True)]

    computed = set(run_chunks(store, list(range(len(records))), key=keys.__getitem__,
                              compute=run_and_arbitrate,
                              batch_size=batch_size or tm.config.batch_size, desc=name,
                              progress=progress))
    return [read_pipeline_record(store, rec.example, name, key, key in computed)
            for rec, key in zip(records, keys, strict=True)]
