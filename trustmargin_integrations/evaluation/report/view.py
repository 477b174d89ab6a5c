"""The run as every report section reads it, and what a section gives back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.evaluation.diagnostics import (
    ArbitrationDiagnostics,
    GradedDecision,
    arbitration_diagnostics,
    average_rows,
    method_scores,
    score_records,
)
from trustmargin_integrations.evaluation.rundir import DatasetRun

if TYPE_CHECKING:
    from trustmargin_integrations.policy_file import PolicyFile


@dataclass(frozen=True)
class RunView:
    """A loaded run, scored once: every section reads these, none recomputes them."""

    runs: list[DatasetRun]
    folder: Path
    """Where the report and its figures go."""
    calibration: PolicyFile | None
    scored: dict[str, list[GradedDecision]]
    tables: dict[str, dict[str, tuple[float, float]]]
    """Dataset -> method -> (F1, EM) x100."""
    average: dict[str, tuple[float, float]]
    diagnostics: dict[str, ArbitrationDiagnostics]
    models: list[str]

    @property
    def names(self) -> list[str]:
        """The run's dataset names, in manifest order."""
        return [r.name for r in self.runs]

    @classmethod
    def of(cls, runs: list[DatasetRun], folder: Path,
           calibration: PolicyFile | None = None) -> RunView:
        """Score every dataset of ``runs`` once."""
        scored = {r.name: score_records(r.records, whole_texts=r.chain_answers) for r in runs}
        tables = {n: method_scores(s) for n, s in scored.items()}
        return cls(runs=runs, folder=folder, calibration=calibration, scored=scored,
                   tables=tables, average=average_rows(tables),
                   diagnostics={n: arbitration_diagnostics(s) for n, s in scored.items()},
                   models=sorted({rec.decision.model_id for r in runs for rec in r.records}))


@dataclass
class Section:
    """A report section: its Markdown lines and its share of ``summary.json``."""

    lines: list[str]
    summary: dict[str, Any] = field(default_factory=dict)
    """Top-level ``summary.json`` entries."""
    per_dataset: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Entries of ``summary.json``'s ``datasets.<name>``."""
