"""The records of an evaluation run, and their one stored form in the run's result store.

An evaluation stores one value per result key in the run's
:class:`~trustmargin_integrations.store.ResultStore`: ``{"decision": Decision, ...}`` plus the
seconds spent outside the arbiter (``retrieval_s`` for the main run, ``pipeline_s`` for an
extra pipeline). The runner writes values with :func:`eval_value` / :func:`pipeline_value`;
the runner, the pipeline runner and the run directory read them back with the ``read_*``
functions here, so the stored shape is defined in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.store import ResultStore

RERUN_FIX = "re-run the same `trustmargin eval` command to fill it"


@dataclass(frozen=True)
class EvalRecord:
    """One evaluated example: its inputs, the cached Decision and the retrieval time."""

    example: EvalExample
    key: str
    passages: tuple[str, ...]
    decision: Decision
    retrieval_s: float
    computed: bool  # False when it came from the cache


@dataclass(frozen=True)
class NoiseRecord:
    """One example at one corruption level: the arbitration with the fixed Direct answer."""

    example: EvalExample
    n_replaced: int
    decision: Decision
    key: str  # cache key (the main run's key at level 0)


@dataclass(frozen=True)
class PipelineRecord:
    """One question under one pipeline: the arbitration of its answer against Direct."""

    example: EvalExample
    pipeline: str
    key: str
    decision: Decision
    pipeline_s: float  # the pipeline's own wall time for this question
    computed: bool


def eval_value(decision: Decision, retrieval_s: float) -> dict[str, Any]:
    """The stored value of one main-run or noise result."""
    return {"decision": decision.model_dump(mode="json"), "retrieval_s": retrieval_s}


def pipeline_value(decision: Decision, pipeline_s: float) -> dict[str, Any]:
    """The stored value of one pipeline result."""
    return {"decision": decision.model_dump(mode="json"), "pipeline_s": pipeline_s}


def _stored(store: ResultStore, key: str, what: str, fix: str = RERUN_FIX
            ) -> tuple[Decision, dict[str, Any]]:
    value = store.require(key, "run_dir", f"cache lacks {what}", fix)
    return Decision.model_validate(value["decision"]), value


def read_eval_record(store: ResultStore, example: EvalExample, key: str,
                     passages: tuple[str, ...] = (), computed: bool = False) -> EvalRecord:
    """A stored main-run result as a record (a typed error when the store lacks it)."""
    decision, value = _stored(store, key, f"{example.dataset}:{example.id}")
    return EvalRecord(example=example, key=key, passages=passages, decision=decision,
                      retrieval_s=float(value.get("retrieval_s", 0.0)), computed=computed)


def read_noise_record(store: ResultStore, example: EvalExample, level: int,
                      key: str) -> NoiseRecord:
    """A stored noise result as a record (a typed error when the store lacks it)."""
    decision, _ = _stored(store, key, f"noise item {example.dataset}:{example.id} at level "
                          f"{level}")
    return NoiseRecord(example, level, decision, key)


def read_pipeline_record(store: ResultStore, example: EvalExample, name: str, key: str,
                         computed: bool = False) -> PipelineRecord:
    """A stored pipeline result as a record (a typed error when the store lacks it)."""
    decision, value = _stored(store, key, f"pipeline {name} for {example.dataset}:{example.id}",
                              "re-run the same `trustmargin eval --pipeline ...` command")
    return PipelineRecord(example, name, key, decision, float(value.get("pipeline_s", 0.0)),
                          computed)
