"""``build_report``: load a run, score it once, and write every section in order."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.evaluation.report import (
    ablations,
    arbitration,
    calibrated,
    complementarity,
    hyperparameters,
    main_table,
    question_types,
    setup,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section
from trustmargin_integrations.evaluation.rundir import load_run
from trustmargin_integrations.files import write_text_atomic

if TYPE_CHECKING:
    from trustmargin_integrations.policy_file import PolicyFile

REPORT_FILE = "report.md"
"""The report's default name in the run directory."""
SUMMARY_FILE = "summary.json"
"""The same numbers as JSON, beside the report."""


def report_files(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Where :func:`build_report` writes the report and its summary (the figures go beside
    them)."""
    report = Path(out) if out else Path(run_dir) / REPORT_FILE
    return report, report.parent / SUMMARY_FILE


# The report's sections, in reading order.
SECTIONS: tuple[Callable[[RunView], Section], ...] = (
    setup.setup,
    main_table.section,
    question_types.section,
    ablations.margin_section,
    arbitration.section,
    arbitration.recovery_section,
    hyperparameters.section,
    calibrated.section,
    complementarity.section,
    ablations.noise_section,
    setup.latency_section,
)


def build_report(run_dir: str | Path, out: str | Path | None = None,
                 *, title: str | None = None,
                 calibration: str | Path | PolicyFile | None = None) -> Path:
    """Write ``report.md``, ``summary.json`` and the PNG figures; return the report's path.

    Args:
        run_dir: a directory written by ``trustmargin eval``.
        out: the report file (default ``RUN_DIR/report.md``); figures go next to it.
        title: the report's heading.
        calibration: a policy file (or ``"shipped"``) whose rule is also reported, on
            the run's questions outside its fit.
    """
    runs = load_run(run_dir)
    fitted = None
    if calibration is not None:
        from trustmargin_integrations.policy_file import PolicyFile

        models = {rec.decision.model_id for r in runs for rec in r.records}
        fitted = PolicyFile.coerce(calibration, model=next(iter(models), None))
    report, summary_file = report_files(run_dir, out)
    folder = report.parent
    folder.mkdir(parents=True, exist_ok=True)
    view = RunView.of(runs, folder, fitted)
    summary: dict[str, Any] = {"models": view.models, "datasets": {}, "average": {}}
    lines = setup.heading(view, title).lines
    for write in SECTIONS:
        section = write(view)
        lines += section.lines
        summary.update(section.summary)
        for name, entries in section.per_dataset.items():
            summary["datasets"].setdefault(name, {}).update(entries)
    _add_tables(summary, view)
    write_text_atomic(summary_file, json.dumps(summary, indent=1))
    write_text_atomic(report, "\n".join(lines) + "\n")
    return report


def _add_tables(summary: dict[str, Any], view: RunView) -> None:
    """Each dataset's size, method scores and diagnostics, and the Average row."""
    for n in view.names:
        d = summary["datasets"].setdefault(n, {})
        d["n"] = len(view.scored[n])
        d["methods"] = {m: {"f1": v[0], "em": v[1]} for m, v in view.tables[n].items()}
        d["diagnostics"] = asdict(view.diagnostics[n])
    summary["average"] = {m: {"f1": v[0], "em": v[1]} for m, v in view.average.items()}
