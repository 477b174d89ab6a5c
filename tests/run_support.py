"""Test helpers shared by the command-line suites: a synthetic run directory (``report``,
``calibrate`` and ``check`` read it without a model) and a guard that fails a test when a
command loads the model it should have refused to load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.rundir import open_store, record_dataset
from trustmargin_integrations.evaluation.runner import EvalRecord
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.schema import Decision


def synthetic_decision(i: int) -> Decision:
    """A scored decision with margins that vary with ``i`` (no model)."""
    m_prior, m_bind = float(i % 5) - 2.0, float(i % 3) - 1.0
    m = m_prior + 0.5 * m_bind
    return Decision.model_validate(dict(
        id=f"x:{i}", question=f"question {i}", answer="Paris", source="direct",
        reason="margin_above_tau" if m > -1.5 else "margin_at_or_below_tau",
        direct_answer="Paris", rag_answer="Lyon", direct_generated=True, rag_generated=True,
        m_prior=m_prior, m_bind=m_bind, m=m, lambda_bind=0.5, tau=-1.5, passages_given=3,
        passages_used=3, context_tokens=100, context_truncated=False, model_id="synthetic",
        prompt_version=PROMPT_VERSION))


def synthetic_run(run_dir: Path, n: int = 12) -> Path:
    """A valid run directory of ``n`` synthetic decisions (its cache and manifest)."""
    store = open_store(run_dir)
    records = []
    for i in range(n):
        decision = synthetic_decision(i)
        store.put(f"k{i}", {"decision": decision.model_dump(mode="json"), "retrieval_s": 0.0})
        example = EvalExample(dataset="x", id=str(i), question=decision.question,
                              answers=("Paris" if i % 2 else "Lyon",))
        records.append(EvalRecord(example, f"k{i}", (), decision, 0.0, computed=True))
    record_dataset(run_dir, "x", records, {"retrieval": "precomputed", "top_k": 3})
    return run_dir


class ModelLoadedError(AssertionError):
    """A command loaded the model although it should have stopped before."""


def forbid_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading the local model fail the test (the command had to refuse first)."""
    from trustmargin_integrations.backends.hf import HFBackend

    def load(*args: Any, **kwargs: Any) -> Any:
        raise ModelLoadedError("the model was loaded before the input was refused")

    monkeypatch.setattr(HFBackend, "load", staticmethod(load))
