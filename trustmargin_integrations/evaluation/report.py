"""The Markdown report of a run directory: the paper's tables, diagnostics and PNG plots.

Everything is recomputed from the run's cache (no model): main table, margin ablation,
source-arbitration diagnostics, disagreement recovery, lambda x tau grid, retrieval-noise
curves and latency. ``summary.json`` next to the report holds the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.evaluation import plots
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
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    GRID_LAMBDAS,
    GRID_TAUS,
    METHOD_LABELS,
    ArbitrationDiagnostics,
    Scored,
    arbitration_diagnostics,
    average_rows,
    best_cell,
    disagreement_recovery,
    hyperparameter_grid,
    latency,
    method_scores,
    noise_summary,
    per_question_scores,
    score_records,
)
from trustmargin_integrations.evaluation.report_sections import (
    calibrated_rule,
    complementarity,
    question_types,
)
from trustmargin_integrations.evaluation.report_sections import markdown_table as _table
from trustmargin_integrations.evaluation.rundir import DatasetRun, load_run

if TYPE_CHECKING:
    from trustmargin_integrations.calibration import Calibration

_DATASET_LABELS = {"cwq": "CWQ", "2wiki": "2Wiki", "hotpotqa": "HotpotQA"}


def inside(folder: Path, name: str) -> Path:
    """``folder / name`` with ``name`` reduced to a plain file name.

    Dataset names come from the run's ``manifest.json``; a crafted one ("../../x") must not
    write outside the run directory.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "unnamed"
    if safe != name:
        # Two names that clean to the same text ("a/b", "a_b") keep separate files.
        stem, dot, ext = safe.rpartition(".")
        tag = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{stem}-{tag}.{ext}" if dot else f"{safe}-{tag}"
    return folder / safe


def _label(name: str) -> str:
    return _DATASET_LABELS.get(name, name)


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


MAIN_METHODS = ("direct", "rag", "trustmargin", "oracle")
COMPARISONS = source_comparisons("trustmargin")
COMPARISON_LABELS = {comparison_key("trustmargin", BEST_SINGLE): "TrustMargin - best single",
                     comparison_key("trustmargin", "direct"): "TrustMargin - Direct",
                     comparison_key("trustmargin", "rag"): "TrustMargin - BM25-RAG"}


def intervals(scored: Mapping[str, Sequence[Scored]], *, seed: int = 0,
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


def _decision_stats(run: DatasetRun) -> dict[str, int]:
    stats: dict[str, int] = {}
    for rec in run.records:
        stats[rec.decision.reason] = stats.get(rec.decision.reason, 0) + 1
    return stats


def build_report(run_dir: str | Path, out: str | Path | None = None,
                 *, title: str | None = None,
                 calibration: str | Path | Calibration | None = None) -> Path:
    """Write ``report.md``, ``summary.json`` and the PNG figures; return the report's path.

    Args:
        run_dir: a directory written by ``trustmargin eval``.
        out: the report file (default ``RUN_DIR/report.md``); figures go next to it.
        title: the report's heading.
        calibration: a calibration file (or ``"shipped"``) whose rule is also reported, on
            the run's questions outside its fit.
    """
    runs = load_run(run_dir)
    fitted = None
    if calibration is not None:
        from trustmargin_integrations.calibration import Calibration

        models = {rec.decision.model_id for r in runs for rec in r.records}
        fitted = Calibration.coerce(calibration, model=next(iter(models), None))
    report = Path(out) if out else Path(run_dir) / "report.md"
    folder = report.parent
    folder.mkdir(parents=True, exist_ok=True)
    scored = {r.name: score_records(r.records) for r in runs}
    names = [r.name for r in runs]
    tables = {n: method_scores(scored[n]) for n in names}
    average = average_rows(tables)
    diags = {n: arbitration_diagnostics(scored[n]) for n in names}
    models = sorted({rec.decision.model_id for r in runs for rec in r.records})
    summary: dict[str, Any] = {"models": models, "datasets": {}, "average": {}}

    lines = [f"# {title or 'TrustMargin evaluation report'}", ""]
    lines += [f"Model: **{', '.join(models)}**. Decision rule: lambda_bind = {DEFAULT_LAMBDA}, "
              f"tau = {DEFAULT_TAU} (the paper's defaults). F1 and EM are x100, max over gold "
              "aliases; Average is the arithmetic mean over datasets.", ""]
    rows = []
    for run in runs:
        info = run.info
        rows.append([_label(run.name), str(len(run.records)), str(info.get("retrieval", "?")),
                     str(info.get("top_k", "?")), str(info.get("dtype", "?")),
                     str(info.get("first_id", "?")) + "-" + str(info.get("last_id", "?"))])
    lines += ["## Setup", ""]
    lines += _table(["dataset", "questions", "retrieval", "top-k", "dtype", "ids"], rows)
    commands = [run.info["command"] for run in runs if run.info.get("command")]
    if commands:
        lines += ["", "Commands:", "", "```", *sorted(set(commands)), "```"]

    # -- main table ---------------------------------------------------------------------------
    lines += ["", "## Main results (as in the paper's Table 1)", ""]
    boots = intervals(scored)
    scopes = [(n, _label(n), tables[n]) for n in names]
    if len(names) > 1:
        scopes.append(("average", "Avg", average))
    header = ["Method"] + [f"{label} {m}" for _, label, _ in scopes
                           for m in ("F1", "EM", "F1 95% CI", "EM 95% CI")]
    main_rows = []
    for method in MAIN_METHODS:
        row = [METHOD_LABELS[method]]
        for key, _, table in scopes:
            row += [_f(table[method][0]), _f(table[method][1]),
                    boots[key]["f1"].methods[method].ci(), boots[key]["em"].methods[method].ci()]
        main_rows.append(row)
    best_key = comparison_key("trustmargin", BEST_SINGLE)
    row = ["TrustMargin - best single source"]
    for key, _, _ in scopes:
        f1d, emd = boots[key]["f1"].differences[best_key], boots[key]["em"].differences[best_key]
        row += [f"{f1d.mean:+.2f}", f"{emd.mean:+.2f}", f"{f1d.ci()} vs {_versus(f1d)}",
                f"{emd.ci()} vs {_versus(emd)}"]
    main_rows.append(row)
    lines += _table(header, main_rows)
    note = boots["average" if len(names) > 1 else names[0]]["f1"].note()
    lines += ["", "Oracle(Direct, RAG) is the post-hoc upper bound of any selector over the same "
              "two candidates (it reads the gold answer). Intervals: " + note + " The best "
              "single source is the better of Direct and BM25-RAG by observed mean, per column; "
              "the Avg intervals resample each dataset's questions within that dataset."]
    lines += ["", "### Is TrustMargin's difference real? (paired bootstrap)", ""]
    sig_rows = []
    for key, label, _ in scopes:
        for comp, comp_label in COMPARISON_LABELS.items():
            f1d, emd = boots[key]["f1"].differences[comp], boots[key]["em"].differences[comp]
            if comp == best_key:
                comp_label += (f" ({_versus(f1d)})" if f1d.b == emd.b
                               else f" (F1: {_versus(f1d)}, EM: {_versus(emd)})")
            sig_rows.append([label, comp_label, f"{f1d.mean:+.2f}", f1d.ci(),
                             f"{f1d.p_positive:.3f}", f"{emd.mean:+.2f}", emd.ci(),
                             f"{emd.p_positive:.3f}"])
    lines += _table(["", "difference", "F1", "F1 95% CI", "share > 0 (F1)", "EM", "EM 95% CI",
                     "share > 0 (EM)"], sig_rows)
    lines += ["", "\"share > 0\" is the fraction of resamples in which the difference is positive "
              "(a one-sided bootstrap probability, not a p-value); an interval that contains 0 "
              "means the sample cannot tell the two methods apart."]
    summary["intervals"] = {key: {m: b.as_dict() for m, b in v.items()}
                            for key, v in boots.items()}
    type_lines, summary["question_types"] = question_types(runs, scored, _label)
    lines += type_lines

    # -- ablation -----------------------------------------------------------------------------
    lines += ["", "## Margin ablation", ""]
    ab_rows = []
    for scope, table in [*[(_label(n), tables[n]) for n in names], ("Average", average)]:
        full_f1, full_em = table["trustmargin"]
        ab_rows.append([scope, f"{_f(full_f1)} / {_f(full_em)}",
                        f"{table['no_prior'][0] - full_f1:+.2f} / "
                        f"{table['no_prior'][1] - full_em:+.2f}",
                        f"{table['no_bind'][0] - full_f1:+.2f} / "
                        f"{table['no_bind'][1] - full_em:+.2f}"])
    lines += _table(["", "Full F1 / EM", "delta w/o M_prior", "delta w/o M_bind"], ab_rows)
    lines += ["", "w/o M_prior decides on `lambda * M_bind > tau`; w/o M_bind on "
              "`M_prior > tau`; both use the same cached candidates and likelihoods."]

    # -- diagnostics --------------------------------------------------------------------------
    lines += ["", "## Source-arbitration diagnostics", ""]
    diag_rows = []
    for n in names:
        diag_rows.append(_diag_row(_label(n), diags[n]))
    if len(names) > 1:
        diag_rows.append(_avg_diag_row(list(diags.values())))
    lines += _table(["", "Oracle gap F1 / EM", "Gap closed F1 / EM (%)", "D>R->D (%)",
                     "R>D->R (%)", "RAG chosen (%)"], diag_rows)
    lines += ["", "Gap = Oracle minus the stronger single source; Gap closed = share of that gap "
              "TrustMargin recovers (negative: below the stronger source). Selection rates are on "
              "strict disagreements (the two candidates' F1 differ); n in brackets."]
    stats_rows = []
    for run in runs:
        st = _decision_stats(run)
        stats_rows.append([_label(run.name), str(len(run.records)),
                           str(st.get("margin_above_tau", 0) + st.get("margin_at_or_below_tau", 0)),
                           str(st.get("answers_agree", 0)),
                           str(sum(v for k, v in st.items() if k.endswith("blank")))])
    lines += ["", "Decision paths (how many questions needed the six likelihoods):", ""]
    lines += _table(["", "questions", "scored", "answers agree (no scoring)", "a blank answer"],
                    stats_rows)

    # -- recovery -----------------------------------------------------------------------------
    lines += ["", "## Disagreement recovery", ""]
    rec_rows = []
    for n in names:
        rec = disagreement_recovery(scored[n])
        figure = plots.recovery_bars(rec, inside(folder, f"recovery_{n}.png"),
                                     title=f"Disagreement recovery, {_label(n)} ({models[0]})")
        lines += [f"![recovery {n}]({figure.name})", ""]
        for key, label in (("direct_favored", "Direct-favored"), ("rag_favored", "RAG-favored")):
            r = rec[key]
            rec_rows.append([_label(n), label, str(r.n_cases), _f(r.available), _f(r.realized),
                             "n/a" if r.ratio is None else f"{100 * r.ratio:.0f}%"])
        summary["datasets"].setdefault(n, {})["recovery"] = {k: asdict(v) for k, v in rec.items()}
    lines += _table(["dataset", "cases", "n", "available gain", "realized gain", "realized %"],
                    rec_rows)
    lines += ["", "Gains are F1 points over the whole dataset: available = perfect selection "
              "minus always taking the other source on those cases; realized = TrustMargin "
              "minus the same baseline."]

    # -- grid ---------------------------------------------------------------------------------
    grid = hyperparameter_grid(scored, GRID_LAMBDAS, GRID_TAUS)
    figure = plots.heatmap(grid, GRID_LAMBDAS, GRID_TAUS, folder / "hparam_heatmap.png",
                           title=f"Average F1 over {', '.join(map(_label, names))} "
                                 f"({models[0]})")
    best = best_cell(grid, GRID_LAMBDAS, GRID_TAUS)
    default = grid[GRID_LAMBDAS.index(DEFAULT_LAMBDA)][GRID_TAUS.index(DEFAULT_TAU)]
    lines += ["", "## Hyper-parameter robustness (replayed from cached likelihoods)", "",
              f"![heatmap]({figure.name})", "",
              f"Default cell (lambda {DEFAULT_LAMBDA}, tau {DEFAULT_TAU}): average F1 "
              f"{default:.2f}. Best cell (lambda {GRID_LAMBDAS[best[0]]:g}, tau "
              f"{GRID_TAUS[best[1]]:g}): {grid[best[0]][best[1]]:.2f}. Always-Direct: "
              f"{average['direct'][0]:.2f}, always-RAG: {average['rag'][0]:.2f}. Picking the "
              "best cell on the evaluation questions themselves is optimistic; the default is "
              "the honest number (ties: the cell nearest the default is shown)."]
    summary["grid"] = {"lambdas": list(GRID_LAMBDAS), "taus": list(GRID_TAUS), "avg_f1": grid}
    calibrated_lines, summary["calibrated"] = calibrated_rule(scored, _label, fitted)
    lines += calibrated_lines
    piped_lines, summary["complementarity"] = complementarity(runs, _label)
    lines += piped_lines

    # -- noise --------------------------------------------------------------------------------
    noisy = {n: noise_summary(r.noise) for n, r in zip(names, runs, strict=True) if r.noise}
    if noisy:
        figure = plots.noise_curves({_label(n): v for n, v in noisy.items()},
                                    folder / "noise_curves.png",
                                    title=f"Retrieval-noise robustness ({models[0]})")
        lines += ["", "## Retrieval-noise robustness", "", f"![noise]({figure.name})", ""]
        noise_rows = []
        for n, levels in noisy.items():
            info = next(r.info.get("noise", {}) for r in runs if r.name == n)
            for lv in levels:
                noise_rows.append([_label(n), str(lv.n_replaced), str(lv.n),
                                   str(lv.n_disagree), _f(lv.rag_selection_rate, 1),
                                   _f(lv.f1_direct), _f(lv.f1_rag), _f(lv.f1_trustmargin)])
            summary["datasets"].setdefault(n, {})["noise"] = {
                "info": info, "levels": [asdict(lv) for lv in levels]}
        lines += _table(["dataset", "replaced", "n", "disagreements", "RAG chosen (%)",
                         "Direct F1", "RAG F1", "TM F1"], noise_rows)
        infos = {n: next(r.info.get("noise", {}) for r in runs if r.name == n) for n in noisy}
        lines += ["", "Replaced passages are drawn at random (seeded: "
                  + ", ".join(f"{_label(n)} seed {i.get('seed')}, pool {i.get('pool')}"
                              for n, i in infos.items())
                  + ") and put at random positions; the Direct answer is held fixed, the RAG "
                  "answer is regenerated and all six likelihoods are rescored."]

    # -- latency ------------------------------------------------------------------------------
    lines += ["", "## Latency on this machine", ""]
    lat_rows = []
    for run in runs:
        lat = latency(run.records)
        lat_rows.append([_label(run.name), _f(lat.direct_s, 3), _f(lat.rag_s, 3),
                         _f(lat.trustmargin_s, 3), _f(lat.scoring_s, 3),
                         _f(lat.relative_to_direct_plus_rag, 2)])
        summary["datasets"].setdefault(run.name, {})["latency"] = {
            **asdict(lat), "relative_to_direct_plus_rag": lat.relative_to_direct_plus_rag}
    lines += _table(["dataset", "Direct s/q", "BM25-RAG s/q", "TrustMargin s/q",
                     "of which scoring s/q", "TM / (Direct + RAG)"], lat_rows)
    hosts = sorted({str(r.info.get("host", "")) for r in runs if r.info.get("host")})
    lines += ["", "Seconds per question are each question's share of its batch's wall time "
              f"(batch size {runs[0].info.get('batch_size', '?')}), CPU only"
              + (f" ({'; '.join(hosts)})" if hosts else "")
              + ". TrustMargin includes both generations and the scoring. Other processes "
              "shared the CPU, so absolute numbers are pessimistic; the ratio is the useful "
              "part."]

    for n in names:
        d = summary["datasets"].setdefault(n, {})
        d["n"] = len(scored[n])
        d["methods"] = {m: {"f1": v[0], "em": v[1]} for m, v in tables[n].items()}
        d["diagnostics"] = asdict(diags[n])
    summary["average"] = {m: {"f1": v[0], "em": v[1]} for m, v in average.items()}
    (folder / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report


def _diag_row(label: str, d: ArbitrationDiagnostics) -> list[str]:
    return [label, f"{_f(d.oracle_gap_f1)} / {_f(d.oracle_gap_em)}",
            f"{_f(d.gap_closed_f1, 1)} / {_f(d.gap_closed_em, 1)}",
            f"{_f(d.d_better_to_d, 1)} (n={d.n_d_better})",
            f"{_f(d.r_better_to_r, 1)} (n={d.n_r_better})", _f(d.rag_selection_rate, 1)]


def _avg_diag_row(diags: Sequence[ArbitrationDiagnostics]) -> list[str]:
    def avg(values: Sequence[float | None]) -> float | None:
        kept = [v for v in values if v is not None]
        return sum(kept) / len(kept) if kept else None

    return ["Average",
            f"{_f(avg([d.oracle_gap_f1 for d in diags]))} / "
            f"{_f(avg([d.oracle_gap_em for d in diags]))}",
            f"{_f(avg([d.gap_closed_f1 for d in diags]), 1)} / "
            f"{_f(avg([d.gap_closed_em for d in diags]), 1)}",
            _f(avg([d.d_better_to_d for d in diags]), 1),
            _f(avg([d.r_better_to_r for d in diags]), 1),
            _f(avg([d.rag_selection_rate for d in diags]), 1)]
