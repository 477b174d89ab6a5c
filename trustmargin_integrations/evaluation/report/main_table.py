"""The paper's Table 1 with paired bootstrap intervals, and whether TrustMargin's
difference from each source is real."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    Bootstrap,
    Difference,
    comparison_key,
    grouped_bootstrap,
    paired_bootstrap,
    source_comparisons,
)
from trustmargin_integrations.evaluation.diagnostics import (
    METHOD_LABELS,
    GradedDecision,
    per_question_scores,
)
from trustmargin_integrations.evaluation.report.formatting import (
    dataset_label,
    markdown_table,
    number,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section

MAIN_METHODS = ("direct", "rag", "trustmargin", "oracle")
COMPARISONS = source_comparisons("trustmargin")
BEST_KEY = comparison_key("trustmargin", BEST_SINGLE)
COMPARISON_LABELS = {BEST_KEY: "TrustMargin - best single",
                     comparison_key("trustmargin", "direct"): "TrustMargin - Direct",
                     comparison_key("trustmargin", "rag"): "TrustMargin - BM25-RAG"}

# (summary key, label, method -> (F1, EM)) of each column group: datasets, then Average.
Scope = tuple[str, str, Mapping[str, tuple[float, float]]]
Boots = Mapping[str, Mapping[str, Bootstrap]]


def intervals(scored: Mapping[str, Sequence[GradedDecision]], *, seed: int = 0,
              resamples: int = 10_000) -> dict[str, dict[str, Bootstrap]]:
    """Paired bootstrap of the main table per dataset, and of the Average (key ``average``,
    each dataset resampled within itself): ``{scope: {"f1": ..., "em": ...}}``."""
    per_q = {n: per_question_scores(s, methods=MAIN_METHODS) for n, s in scored.items()}
    out: dict[str, dict[str, Bootstrap]] = {}
    for col, metric in enumerate(("f1", "em")):
        groups = {n: {m: v[m][col] for m in MAIN_METHODS} for n, v in per_q.items()}
        for n, scores in groups.items():
            out.setdefault(n, {})[metric] = paired_bootstrap(
                scores, COMPARISONS, seed=seed, resamples=resamples)
        out.setdefault("average", {})[metric] = grouped_bootstrap(
            groups, COMPARISONS, seed=seed, resamples=resamples)
    return out


def _versus(d: Difference) -> str:
    return METHOD_LABELS[d.b]


def section(view: RunView) -> Section:
    """Main results with intervals, then the paired differences table."""
    names = view.names
    boots = intervals(view.scored)
    scopes: list[Scope] = [(n, dataset_label(n), view.tables[n]) for n in names]
    if len(names) > 1:
        scopes.append(("average", "Avg", view.average))
    note = boots["average" if len(names) > 1 else names[0]]["f1"].note()
    lines = ["", "## Main results (as in the paper's Table 1)", "",
             *_results_table(scopes, boots),
             "", "Oracle(Direct, RAG) is the post-hoc upper bound of any selector over the "
             "same two candidates (it reads the gold answer). Intervals: " + note + " The best "
             "single source is the better of Direct and BM25-RAG by observed mean, per column; "
             "the Avg intervals resample each dataset's questions within that dataset.",
             "", "### Is TrustMargin's difference real? (paired bootstrap)", "",
             *_differences_table(scopes, boots),
             "", "\"share > 0\" is the fraction of resamples in which the difference is "
             "positive (a one-sided bootstrap probability, not a p-value); an interval that "
             "contains 0 means the sample cannot tell the two methods apart.",
             "", "Before deploying on a domain, run `trustmargin check RUN_DIR` (or on your "
             "own labeled file): it keeps TrustMargin only where it beats plain RAG with a "
             "positive interval on questions the choice did not see, and otherwise says "
             "\"use RAG\" (docs/evaluation.md, \"Domain check\")."]
    intervals_summary = {key: {m: b.as_dict() for m, b in v.items()} for key, v in boots.items()}
    return Section(lines, {"intervals": intervals_summary})


def _results_table(scopes: Sequence[Scope], boots: Boots) -> list[str]:
    header = ["Method"] + [f"{label} {m}" for _, label, _ in scopes
                           for m in ("F1", "EM", "F1 95% CI", "EM 95% CI")]
    rows = []
    for method in MAIN_METHODS:
        row = [METHOD_LABELS[method]]
        for key, _, table in scopes:
            row += [number(table[method][0]), number(table[method][1]),
                    boots[key]["f1"].methods[method].ci(), boots[key]["em"].methods[method].ci()]
        rows.append(row)
    row = ["TrustMargin - best single source"]
    for key, _, _ in scopes:
        f1d, emd = boots[key]["f1"].differences[BEST_KEY], boots[key]["em"].differences[BEST_KEY]
        row += [f"{f1d.mean:+.2f}", f"{emd.mean:+.2f}", f"{f1d.ci()} vs {_versus(f1d)}",
                f"{emd.ci()} vs {_versus(emd)}"]
    rows.append(row)
    return markdown_table(header, rows)


def _differences_table(scopes: Sequence[Scope], boots: Boots) -> list[str]:
    rows = []
    for key, label, _ in scopes:
        for comp, comp_label in COMPARISON_LABELS.items():
            f1d, emd = boots[key]["f1"].differences[comp], boots[key]["em"].differences[comp]
            if comp == BEST_KEY:
                comp_label += (f" ({_versus(f1d)})" if f1d.b == emd.b
                               else f" (F1: {_versus(f1d)}, EM: {_versus(emd)})")
            rows.append([label, comp_label, f"{f1d.mean:+.2f}", f1d.ci(),
                         f"{f1d.p_positive:.3f}", f"{emd.mean:+.2f}", emd.ci(),
                         f"{emd.p_positive:.3f}"])
    return markdown_table(["", "difference", "F1", "F1 95% CI", "share > 0 (F1)", "EM",
                           "EM 95% CI", "share > 0 (EM)"], rows)
