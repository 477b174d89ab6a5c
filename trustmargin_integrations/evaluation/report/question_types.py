"""The main methods per question type (2WikiMultihopQA's compositional / comparison files),
with paired bootstrap intervals within each type."""

from __future__ import annotations

from typing import Any

from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    comparison_key,
    source_comparisons,
)
from trustmargin_integrations.evaluation.diagnostics import METHOD_LABELS, per_question_scores
from trustmargin_integrations.evaluation.report.formatting import (
    dataset_label,
    f1_cells,
    f1_difference,
    markdown_table,
    metric_boots,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section

TYPE_METHODS = ("direct", "rag", "trustmargin", "oracle")


def section(view: RunView) -> Section:
    """Per-type rows for datasets whose questions carry several types (none otherwise)."""
    rows: list[list[str]] = []
    summary: dict[str, Any] = {}
    comparisons = source_comparisons("trustmargin")
    best = comparison_key("trustmargin", BEST_SINGLE)
    for run in view.runs:
        types = [str(rec.example.meta.get("type", "")) for rec in run.records]
        if len(set(types)) < 2 or "" in types:
            continue
        for kind in sorted(set(types)):
            subset = [s for s, t in zip(view.scored[run.name], types, strict=True) if t == kind]
            per_q = per_question_scores(subset, methods=TYPE_METHODS)
            boots = metric_boots({kind: per_q}, comparisons)
            rows.append([dataset_label(run.name), kind, str(len(subset)),
                         *f1_cells(boots, TYPE_METHODS), f1_difference(boots, best)])
            summary.setdefault(run.name, {})[kind] = {m: b.as_dict() for m, b in boots.items()}
    if not rows:
        return Section([], {"question_types": {}})
    header = ["dataset", "type", "n", *(f"{METHOD_LABELS[m]} F1" for m in TYPE_METHODS),
              "TrustMargin - best single (F1)"]
    lines = ["", "### Per question type", "", *markdown_table(header, rows), "",
             "F1 x100 with 95% paired bootstrap intervals within each type (10,000 resamples, "
             "seed 0); types with fewer than 100 questions have wide intervals."]
    return Section(lines, {"question_types": summary})
