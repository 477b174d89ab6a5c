"""Source-arbitration diagnostics: how much of the oracle gap TrustMargin closes, which
decision path each question took, and how much of the disagreements' gain it recovers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from trustmargin_integrations.evaluation import plots
from trustmargin_integrations.evaluation.diagnostics import (
    ArbitrationDiagnostics,
    disagreement_recovery,
)
from trustmargin_integrations.evaluation.report.formatting import (
    dataset_label,
    inside,
    markdown_table,
    number,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section
from trustmargin_integrations.evaluation.rundir import DatasetRun


def section(view: RunView) -> Section:
    """Oracle gap, gap closed and selection rates per dataset, then the decision paths."""
    rows = [_diagnostics_row(dataset_label(n), view.diagnostics[n]) for n in view.names]
    if len(view.names) > 1:
        rows.append(_average_row(list(view.diagnostics.values())))
    paths = []
    for run in view.runs:
        st = _decision_paths(run)
        paths.append([dataset_label(run.name), str(len(run.records)),
                      str(st.get("margin_above_tau", 0) + st.get("margin_at_or_below_tau", 0)),
                      str(st.get("answers_agree", 0)),
                      str(sum(v for k, v in st.items() if k.endswith("blank")))])
    return Section([
        "", "## Source-arbitration diagnostics", "",
        *markdown_table(["", "Oracle gap F1 / EM", "Gap closed F1 / EM (%)", "D>R->D (%)",
                         "R>D->R (%)", "RAG chosen (%)"], rows),
        "", "Gap = Oracle minus the stronger single source; Gap closed = share of that gap "
        "TrustMargin recovers (negative: below the stronger source). Selection rates are on "
        "strict disagreements (the two candidates' F1 differ); n in brackets.",
        "", "Decision paths (how many questions needed the six likelihoods):", "",
        *markdown_table(["", "questions", "scored", "answers agree (no scoring)",
                         "a blank answer"], paths)])


def recovery_section(view: RunView) -> Section:
    """Per dataset, a bar figure and the available / realized gain on each disagreement."""
    lines = ["", "## Disagreement recovery", ""]
    rows, per_dataset = [], {}
    for n in view.names:
        rec = disagreement_recovery(view.scored[n])
        figure = plots.recovery_bars(
            rec, inside(view.folder, f"recovery_{n}.png"),
            title=f"Disagreement recovery, {dataset_label(n)} ({view.models[0]})")
        lines += [f"![recovery {n}]({figure.name})", ""]
        for key, label in (("direct_favored", "Direct-favored"), ("rag_favored", "RAG-favored")):
            r = rec[key]
            rows.append([dataset_label(n), label, str(r.n_cases), number(r.available),
                         number(r.realized),
                         "n/a" if r.ratio is None else f"{100 * r.ratio:.0f}%"])
        per_dataset[n] = {"recovery": {k: asdict(v) for k, v in rec.items()}}
    lines += [*markdown_table(["dataset", "cases", "n", "available gain", "realized gain",
                               "realized %"], rows),
              "", "Gains are F1 points over the whole dataset: available = perfect selection "
              "minus always taking the other source on those cases; realized = TrustMargin "
              "minus the same baseline."]
    return Section(lines, per_dataset=per_dataset)


def _decision_paths(run: DatasetRun) -> dict[str, int]:
    """How many of the run's decisions took each reason."""
    stats: dict[str, int] = {}
    for rec in run.records:
        stats[rec.decision.reason] = stats.get(rec.decision.reason, 0) + 1
    return stats


def _diagnostics_row(label: str, d: ArbitrationDiagnostics) -> list[str]:
    return [label, f"{number(d.oracle_gap_f1)} / {number(d.oracle_gap_em)}",
            f"{number(d.gap_closed_f1, 1)} / {number(d.gap_closed_em, 1)}",
            f"{number(d.d_better_to_d, 1)} (n={d.n_d_better})",
            f"{number(d.r_better_to_r, 1)} (n={d.n_r_better})", number(d.rag_selection_rate, 1)]


def _average_row(diags: Sequence[ArbitrationDiagnostics]) -> list[str]:
    def avg(values: Sequence[float | None]) -> float | None:
        kept = [v for v in values if v is not None]
        return sum(kept) / len(kept) if kept else None

    return ["Average",
            f"{number(avg([d.oracle_gap_f1 for d in diags]))} / "
            f"{number(avg([d.oracle_gap_em for d in diags]))}",
            f"{number(avg([d.gap_closed_f1 for d in diags]), 1)} / "
            f"{number(avg([d.gap_closed_em for d in diags]), 1)}",
            number(avg([d.d_better_to_d for d in diags]), 1),
            number(avg([d.r_better_to_r for d in diags]), 1),
            number(avg([d.rag_selection_rate for d in diags]), 1)]
