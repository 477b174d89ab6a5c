"""The paper's complementarity table: each extra pipeline of ``eval --pipeline`` alone and
with TrustMargin on top, then TrustMargin over all candidates at once and their oracle.

Every row is on the questions the pipelines ran on (the main run's BM25-RAG row too, so the
rows are paired); deltas are paired bootstrap intervals of (pipeline + TrustMargin) -
pipeline alone, per dataset and on the Average (each dataset resampled within itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trustmargin_integrations.evaluation.diagnostics import score_decision
from trustmargin_integrations.evaluation.metrics import exact_match, token_f1
from trustmargin_integrations.evaluation.report.formatting import (
    MethodScores,
    dataset_label,
    markdown_table,
    metric_boots,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section
from trustmargin_integrations.evaluation.rundir import DatasetRun
from trustmargin_integrations.rule.replay import multi_candidate_answer, replay
from trustmargin_integrations.schema import Decision

PIPELINE_LABELS = {"bm25": "BM25-RAG", "ircot": "IRCoT", "flare": "FLARE",
                   "clehe": "CLeHe-RAG", "dtr": "DTR-RAG"}
_HEADER = ["RAG candidate", "n", "alone F1 / EM", "+ TrustMargin F1 / EM", "delta F1 (95% CI)",
           "delta EM (95% CI)", "pipeline s/q", "+ scoring s/q"]


@dataclass(frozen=True)
class _Row:
    cells: list[str]
    summary: dict[str, Any]
    note: str


def section(view: RunView) -> Section:
    """The complementarity table (nothing when the run has no pipelines)."""
    runs = view.runs
    names = list(dict.fromkeys(p for r in runs for p in r.pipelines))
    if not names:
        return Section([], {"complementarity": {}})
    rows, summary, note = [], {}, ""
    for pipe in ["bm25", *names]:
        row = _pipeline_row(runs, pipe)
        if row is None:
            continue
        rows.append(row.cells)
        summary[pipe] = row.summary
        note = note or row.note  # every row is on the same questions
    multi_rows, summary["multi"] = _multi_candidate_rows(runs, ["bm25", *names])
    rows += multi_rows
    scope = ", ".join(f"{dataset_label(r.name)} {len(_pipeline_ids(r))}" for r in runs
                      if _pipeline_ids(r))
    lines = ["", "## Plug-and-play complementarity (TrustMargin on top of other pipelines)", "",
             f"Questions: {scope} (the questions the pipelines ran on). F1 / EM x100, Average "
             "over datasets; each pipeline's answer is the RAG-side candidate, arbitrated "
             "against the same Direct answer over the same top-k passages as BM25-RAG.", "",
             *markdown_table(_HEADER, rows), "",
             "All candidates (multi): TrustMargin picks among Direct and every RAG candidate "
             "above at once (each candidate's margin against Direct; the largest one wins if "
             "it is above tau; `Policy.verdict`), replayed from the same cached "
             "likelihoods; its delta is against BM25-RAG + TrustMargin. Oracle: the best of "
             "Direct and all candidates by the gold answer (an upper bound, no selector).", "",
             f"Deltas: {note} 'pipeline s/q' "
             "is the candidate's own cost (BM25-RAG: retrieval and RAG generation); '+ scoring "
             "s/q' is what TrustMargin adds (the six likelihoods; the Direct answer is shared "
             "by every row). Seconds are this machine's, per question."]
    return Section(lines, {"complementarity": summary})


def _pipeline_row(runs: Sequence[DatasetRun], pipe: str) -> _Row | None:
    """One candidate source alone and with TrustMargin, over every dataset it ran on."""
    groups: dict[str, MethodScores] = {}
    latency: list[tuple[float, float]] = []
    for run in runs:
        ids = _pipeline_ids(run)
        decisions = _candidate_decisions(run, pipe, ids) if ids else None
        if decisions is None:
            continue
        gold = {rec.example.id: rec.example.answers for rec in run.records}
        alone: tuple[list[float], list[float]] = ([], [])
        with_tm: tuple[list[float], list[float]] = ([], [])
        for ident, (decision, seconds) in decisions.items():
            s = score_decision(decision, gold[ident])
            choice = replay(decision)
            alone[0].append(s.f1_rag)
            alone[1].append(s.em_rag)
            with_tm[0].append(s.f1(choice))
            with_tm[1].append(s.em(choice))
            latency.append((seconds, decision.timings.scoring_s))
        groups[run.name] = {"alone": alone, "trustmargin": with_tm}
    if not groups:
        return None
    boots = metric_boots(groups, [("trustmargin", "alone")])
    f1, em = boots["f1"], boots["em"]
    d_f1 = f1.differences["trustmargin - alone"]
    d_em = em.differences["trustmargin - alone"]
    per_q = sum(a for a, _ in latency) / len(latency)
    scoring = sum(b for _, b in latency) / len(latency)
    cells = [PIPELINE_LABELS.get(pipe, pipe), str(f1.n),
             f"{f1.methods['alone'].mean:.2f} / {em.methods['alone'].mean:.2f}",
             f"{f1.methods['trustmargin'].mean:.2f} / {em.methods['trustmargin'].mean:.2f}",
             f"{d_f1.mean:+.2f} {d_f1.ci()}", f"{d_em.mean:+.2f} {d_em.ci()}",
             f"{per_q:.2f}", f"{scoring:.2f}"]
    return _Row(cells, {"f1": f1.as_dict(), "em": em.as_dict(), "pipeline_s": per_q,
                        "scoring_s": scoring}, f1.note())


def _pipeline_ids(run: DatasetRun) -> list[str]:
    """Ids of the questions every pipeline of the run ran on, in run order."""
    if not run.pipelines:
        return []
    common = set.intersection(*({r.example.id for r in recs} for recs in run.pipelines.values()))
    return [rec.example.id for rec in run.records if rec.example.id in common]


def _candidate_decisions(run: DatasetRun, pipe: str, ids: Sequence[str]
                         ) -> dict[str, tuple[Decision, float]] | None:
    """Question id -> (decision, pipeline seconds) of one candidate source on ``ids``."""
    wanted = set(ids)
    if pipe == "bm25":
        # BM25-RAG's own cost: its retrieval and its RAG generation.
        return {rec.example.id: (rec.decision, rec.retrieval_s
                                 + rec.decision.timings.generate_rag_s)
                for rec in run.records if rec.example.id in wanted}
    if pipe not in run.pipelines:
        return None
    return {r.example.id: (r.decision, r.pipeline_s) for r in run.pipelines[pipe]
            if r.example.id in wanted}


def _multi_candidate_rows(runs: Sequence[DatasetRun], sources: Sequence[str]
                          ) -> tuple[list[list[str]], dict[str, Any]]:
    """Rows for TrustMargin over all candidates at once, and for their oracle."""
    if len(sources) < 2:
        return [], {}
    groups: dict[str, MethodScores] = {}
    for run in runs:
        ids = _pipeline_ids(run)
        per_source = [_candidate_decisions(run, s, ids) for s in sources]
        if not ids or any(d is None for d in per_source):
            continue
        gold = {rec.example.id: rec.example.answers for rec in run.records}
        cols: dict[str, tuple[list[float], list[float]]] = {
            "bm25_tm": ([], []), "multi": ([], []), "oracle": ([], [])}
        for ident in ids:
            decisions = [d[ident][0] for d in per_source if d is not None]
            answers = [decisions[0].direct_answer, *(d.rag_answer for d in decisions)]
            picks = {"bm25_tm": decisions[0].answer, "multi": multi_candidate_answer(decisions)}
            for key, answer in picks.items():
                cols[key][0].append(token_f1(answer, gold[ident]))
                cols[key][1].append(exact_match(answer, gold[ident]))
            cols["oracle"][0].append(max(token_f1(a, gold[ident]) for a in answers))
            cols["oracle"][1].append(max(exact_match(a, gold[ident]) for a in answers))
        groups[run.name] = cols
    if not groups:
        return [], {}
    boots = metric_boots(groups, [("multi", "bm25_tm")])
    f1, em = boots["f1"], boots["em"]
    d_f1, d_em = f1.differences["multi - bm25_tm"], em.differences["multi - bm25_tm"]
    rows = [[f"All {len(sources)} candidates + TrustMargin (multi)", str(f1.n), "",
             f"{f1.methods['multi'].mean:.2f} / {em.methods['multi'].mean:.2f}",
             f"{d_f1.mean:+.2f} {d_f1.ci()}", f"{d_em.mean:+.2f} {d_em.ci()}", "", ""],
            [f"Oracle(Direct, all {len(sources)} candidates)", str(f1.n),
             f"{f1.methods['oracle'].mean:.2f} / {em.methods['oracle'].mean:.2f}",
             "", "", "", "", ""]]
    return rows, {"f1": f1.as_dict(), "em": em.as_dict(), "sources": list(sources)}
