"""Report sections beyond the paper's tables: per question type, and the calibrated rule.

* :func:`question_types`: the main methods per question type (2WikiMultihopQA's
  compositional / comparison files), with paired bootstrap intervals.
* :func:`complementarity`: each extra pipeline of ``eval --pipeline`` alone and with
  TrustMargin on top (the paper's complementarity table).
* :func:`calibrated_rule`: the rule with a fitted (lambda_bind, tau), always measured on
  questions the fit did not see: 5-fold cross-validation over the run (every question scored
  by a fit on the other folds), and, given a calibration file, that file's lambda and tau on
  the run's questions outside the file's fit (``fitted_on.question_ids``).

Both return Markdown lines and a JSON-ready dict for ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trustmargin_integrations.calibration import Calibration
from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    Bootstrap,
    comparison_key,
    grouped_bootstrap,
    paired_bootstrap,
    source_comparisons,
)
from trustmargin_integrations.evaluation.calibration import Problem, cross_validate
from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    METHOD_LABELS,
    Scored,
    per_question_scores,
    score_decision,
)
from trustmargin_integrations.evaluation.metrics import exact_match, token_f1
from trustmargin_integrations.evaluation.rundir import DatasetRun
from trustmargin_integrations.margins import decide_among, settle_among
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.schema import Decision

TYPE_METHODS = ("direct", "rag", "trustmargin", "oracle")
CALIBRATED_METHODS = ("direct", "rag", "default", "calibrated", "oracle")
CALIBRATED_COMPARISONS = [("calibrated", "default"), ("calibrated", BEST_SINGLE)]
CV_FOLDS = 5
CV_SEED = 0
_LABELS = {**METHOD_LABELS, "default": "TrustMargin (0.5, -1.5)",
           "calibrated": "TrustMargin, calibrated"}

Labeler = Callable[[str], str]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _metric_boots(groups: Mapping[str, Mapping[str, tuple[list[float], list[float]]]],
                  comparisons: Sequence[tuple[str, str]]) -> dict[str, Bootstrap]:
    """F1 and EM bootstraps: one group -> paired, several -> grouped (mean of means)."""
    out = {}
    for col, metric in enumerate(("f1", "em")):
        data = {g: {m: v[col] for m, v in methods.items()} for g, methods in groups.items()}
        out[metric] = (paired_bootstrap(next(iter(data.values())), comparisons)
                       if len(data) == 1 else grouped_bootstrap(data, comparisons))
    return out


def _cells(boots: Mapping[str, Bootstrap], methods: Sequence[str]) -> list[str]:
    return [f"{boots['f1'].methods[m].mean:.2f} {boots['f1'].methods[m].ci()}"
            for m in methods]


def _difference(boots: Mapping[str, Bootstrap], key: str) -> str:
    d = boots["f1"].differences[key]
    versus = "" if key.split(" - ")[1] != BEST_SINGLE else f" vs {METHOD_LABELS[d.b]}"
    return f"{d.mean:+.2f} {d.ci()}{versus}"


def question_types(runs: Sequence[DatasetRun], scored: Mapping[str, Sequence[Scored]],
                   label: Labeler) -> tuple[list[str], dict[str, Any]]:
    """Main methods per question type, for datasets whose questions carry several types."""
    rows, summary = [], {}
    comparisons = source_comparisons("trustmargin")
    best = comparison_key("trustmargin", BEST_SINGLE)
    for run in runs:
        types = [str(rec.example.meta.get("type", "")) for rec in run.records]
        if len(set(types)) < 2 or "" in types:
            continue
        for kind in sorted(set(types)):
            subset = [s for s, t in zip(scored[run.name], types, strict=True) if t == kind]
            per_q = per_question_scores(subset, methods=TYPE_METHODS)
            boots = _metric_boots({kind: per_q}, comparisons)
            rows.append([label(run.name), kind, str(len(subset)),
                         *_cells(boots, TYPE_METHODS), _difference(boots, best)])
            summary.setdefault(run.name, {})[kind] = {m: b.as_dict() for m, b in boots.items()}
    if not rows:
        return [], {}
    header = ["dataset", "type", "n", *(f"{METHOD_LABELS[m]} F1" for m in TYPE_METHODS),
              "TrustMargin - best single (F1)"]
    lines = ["", "### Per question type", "", *markdown_table(header, rows), "",
             "F1 x100 with 95% paired bootstrap intervals within each type (10,000 resamples, "
             "seed 0); types with fewer than 100 questions have wide intervals."]
    return lines, summary


def _calibrated_rows(groups: Mapping[str, Mapping[str, tuple[list[float], list[float]]]],
                     label: Labeler) -> tuple[list[list[str]], dict[str, Any]]:
    rows, summary = [], {}
    scopes: list[tuple[str, Mapping[str, Any]]] = [(n, {n: g}) for n, g in groups.items()]
    if len(groups) > 1:
        scopes.append(("average", groups))
    for name, data in scopes:
        boots = _metric_boots(data, CALIBRATED_COMPARISONS)
        n = sum(len(next(iter(g.values()))[0]) for g in data.values())
        rows.append([label(name) if name != "average" else "Avg", str(n),
                     *_cells(boots, CALIBRATED_METHODS),
                     _difference(boots, comparison_key("calibrated", "default")),
                     _difference(boots, comparison_key("calibrated", BEST_SINGLE))])
        summary[name] = {m: b.as_dict() for m, b in boots.items()}
    return rows, summary


_HEADER = ["", "n", *(f"{_LABELS[m]} F1" for m in CALIBRATED_METHODS),
           "calibrated - default", "calibrated - best single"]


def _with_calibrated(subset: Sequence[Scored], chosen: Sequence[tuple[float, float]]
                     ) -> dict[str, tuple[list[float], list[float]]]:
    """Per-question (F1, EM) of the fixed methods plus the calibrated rule's ``chosen``
    (lambda, tau) per question."""
    base = per_question_scores(subset, methods=("direct", "rag", "trustmargin", "oracle"))
    f1s, ems = [], []
    for s, (lam, tau) in zip(subset, chosen, strict=True):
        choice = s.decision.replay(lam, tau)
        f1s.append(s.f1(choice))
        ems.append(s.em(choice))
    return {"direct": base["direct"], "rag": base["rag"], "default": base["trustmargin"],
            "calibrated": (f1s, ems), "oracle": base["oracle"]}


def calibrated_rule(scored: Mapping[str, Sequence[Scored]], label: Labeler,
                    calibration: Calibration | None = None) -> tuple[list[str], dict[str, Any]]:
    """The calibrated rule on unseen questions: cross-validated, and a given file held out."""
    lines = ["", "## Calibrated rule (on questions the fit did not see)", ""]
    summary: dict[str, Any] = {}
    total = sum(len(v) for v in scored.values())
    if total >= 2 * CV_FOLDS:
        problem = Problem(scored, "f1")
        cv = cross_validate(problem, CV_FOLDS, CV_SEED, resamples=1)
        fit_of = {q: (f.fit.lambda_bind, f.fit.tau) for f in cv.fold_fits for q in f.test}
        groups, start = {}, 0
        for name, items in scored.items():
            chosen = [fit_of[q] for q in range(start, start + len(items))]
            groups[name] = _with_calibrated(items, chosen)
            start += len(items)
        rows, summary["cross_validated"] = _calibrated_rows(groups, label)
        fits = ", ".join(f"({f.fit.lambda_bind:g}, {f.fit.tau:g})" for f in cv.fold_fits)
        lines += [f"**{CV_FOLDS}-fold cross-validation over this run** (folds stratified by "
                  f"dataset, seed {CV_SEED}; objective: average F1; each question is decided "
                  "with the lambda and tau fitted on the other folds; per-fold fits "
                  f"(lambda, tau): {fits}):", "", *markdown_table(_HEADER, rows), ""]
    if calibration is not None:
        calibration.check(_only_model(scored), PROMPT_VERSION)
        fitted = set(calibration.fitted_on.question_ids)
        held = {n: [s for s in items if str(s.decision.id) not in fitted]
                for n, items in scored.items()}
        held = {n: items for n, items in held.items() if items}
        where = (f"the {sum(map(len, held.values()))} questions of this run outside its fit "
                 f"({len(fitted)} ids listed in the file)" if fitted else
                 "all questions of this run: the file lists no fitted ids, so some of them "
                 "may be in its fit and this row may be optimistic")
        lines += [f"**Calibration file** (lambda_bind {calibration.lambda_bind:g}, tau "
                  f"{calibration.tau:g}; fitted on {calibration.fitted_on.n} questions of "
                  f"run {calibration.fitted_on.run_dir}) on {where}:", ""]
        if held:
            const = (calibration.lambda_bind, calibration.tau)
            groups = {n: _with_calibrated(items, [const] * len(items))
                      for n, items in held.items()}
            rows, summary["calibration_file"] = _calibrated_rows(groups, label)
            lines += [*markdown_table(_HEADER, rows), ""]
            summary["calibration_file"]["lambda_bind"] = calibration.lambda_bind
            summary["calibration_file"]["tau"] = calibration.tau
        else:
            lines += ["(no question of this run lies outside the fit)", ""]
    if len(lines) == 3:
        return [], {}
    lines += [f"F1 x100 with 95% paired bootstrap intervals (10,000 resamples, seed 0); "
              f"TrustMargin (0.5, -1.5) is the paper's default rule on the same questions, "
              f"lambda {DEFAULT_LAMBDA:g}, tau {DEFAULT_TAU:g}. The Avg row resamples each "
              "dataset within itself. An interval that contains 0 means the sample cannot "
              "tell the calibrated rule from the other."]
    return lines, summary


def _only_model(scored: Mapping[str, Sequence[Scored]]) -> str:
    models = sorted({s.decision.model_id for items in scored.values() for s in items})
    return models[0] if len(models) == 1 else ", ".join(models)


def complementarity(runs: Sequence[DatasetRun], label: Labeler
                    ) -> tuple[list[str], dict[str, Any]]:
    """The paper's complementarity table: each pipeline alone and with TrustMargin on top.

    Every row is on the questions the pipelines ran on (the main run's BM25-RAG row too, so
    the rows are paired); deltas are paired bootstrap intervals of (pipeline + TrustMargin) -
    pipeline alone, per dataset and on the Average (each dataset resampled within itself).
    """
    names = list(dict.fromkeys(p for r in runs for p in r.pipelines))
    if not names:
        return [], {}
    rows, summary, note = [], {}, ""
    for pipe in ["bm25", *names]:
        groups: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
        latency: list[tuple[float, float]] = []
        for run in runs:
            ids = _pipeline_ids(run)
            if not ids:
                continue
            decisions = _candidate_decisions(run, pipe, ids)
            if decisions is None:
                continue
            gold = {rec.example.id: rec.example.answers for rec in run.records}
            alone: tuple[list[float], list[float]] = ([], [])
            with_tm: tuple[list[float], list[float]] = ([], [])
            for ident, (decision, seconds) in decisions.items():
                s = score_decision(decision, gold[ident])
                choice = decision.replay()
                alone[0].append(s.f1_rag)
                alone[1].append(s.em_rag)
                with_tm[0].append(s.f1(choice))
                with_tm[1].append(s.em(choice))
                latency.append((seconds, decision.timings.scoring_s))
            groups[run.name] = {"alone": alone, "trustmargin": with_tm}
        if not groups:
            continue
        boots = _metric_boots(groups, [("trustmargin", "alone")])
        f1, em = boots["f1"], boots["em"]
        d_f1 = f1.differences["trustmargin - alone"]
        d_em = em.differences["trustmargin - alone"]
        note = note or f1.note()  # every row is on the same questions
        per_q = sum(a for a, _ in latency) / len(latency)
        scoring = sum(b for _, b in latency) / len(latency)
        title = _PIPELINE_LABELS.get(pipe, pipe)
        rows.append([title, str(f1.n), f"{f1.methods['alone'].mean:.2f} / "
                     f"{em.methods['alone'].mean:.2f}",
                     f"{f1.methods['trustmargin'].mean:.2f} / "
                     f"{em.methods['trustmargin'].mean:.2f}",
                     f"{d_f1.mean:+.2f} {d_f1.ci()}", f"{d_em.mean:+.2f} {d_em.ci()}",
                     f"{per_q:.2f}", f"{scoring:.2f}"])
        summary[pipe] = {"f1": f1.as_dict(), "em": em.as_dict(), "pipeline_s": per_q,
                         "scoring_s": scoring}
    multi_rows, summary["multi"] = _multi_candidate_rows(runs, ["bm25", *names])
    rows += multi_rows
    scope = ", ".join(f"{label(r.name)} {len(_pipeline_ids(r))}" for r in runs
                      if _pipeline_ids(r))
    lines = ["", "## Plug-and-play complementarity (TrustMargin on top of other pipelines)", "",
             f"Questions: {scope} (the questions the pipelines ran on). F1 / EM x100, Average "
             "over datasets; each pipeline's answer is the RAG-side candidate, arbitrated "
             "against the same Direct answer over the same top-k passages as BM25-RAG.", "",
             *markdown_table(["RAG candidate", "n", "alone F1 / EM", "+ TrustMargin F1 / EM",
                              "delta F1 (95% CI)", "delta EM (95% CI)", "pipeline s/q",
                              "+ scoring s/q"], rows), "",
             "All candidates (multi): TrustMargin picks among Direct and every RAG candidate "
             "above at once (each candidate's margin against Direct; the largest one wins if "
             "it is above tau; `margins.decide_among`), replayed from the same cached "
             "likelihoods; its delta is against BM25-RAG + TrustMargin. Oracle: the best of "
             "Direct and all candidates by the gold answer (an upper bound, no selector).", "",
             f"Deltas: {note} 'pipeline s/q' "
             "is the candidate's own cost (BM25-RAG: retrieval and RAG generation); '+ scoring "
             "s/q' is what TrustMargin adds (the six likelihoods; the Direct answer is shared "
             "by every row). Seconds are this machine's, per question."]
    return lines, summary


_PIPELINE_LABELS = {"bm25": "BM25-RAG", "ircot": "IRCoT", "flare": "FLARE",
                    "clehe": "CLeHe-RAG", "dtr": "DTR-RAG"}


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


def multi_candidate_answer(decisions: Sequence[Decision]) -> str:
    """The answer TrustMargin keeps among Direct and several RAG candidates, given one
    pairwise decision per candidate (same question, Direct answer and passages).

    Each candidate's likelihoods do not depend on the other candidates, so its pairwise
    margins are the ones multi-candidate arbitration computes; the choice is made by the one
    rule (:func:`~trustmargin_integrations.margins.settle_among`, then
    :func:`~trustmargin_integrations.margins.decide_among`).
    """
    first = decisions[0]
    blank = [d.reason in ("rag_answer_blank", "both_answers_blank") for d in decisions]
    agree = [d.reason == "answers_agree" for d in decisions]
    direct_blank = any(d.reason in ("direct_answer_blank", "both_answers_blank")
                       for d in decisions)
    verdict = settle_among(has_evidence=all(d.reason != "no_evidence" for d in decisions),
                           direct_blank=direct_blank, rag_blank=blank, agree_unscored=agree)
    if verdict is None:
        margins = [(d.m_prior, d.m_bind) if d.m_prior is not None and d.m_bind is not None
                   else (0.0, 0.0) if a else None for d, a in zip(decisions, agree, strict=True)]
        verdict = decide_among(margins, first.lambda_bind, first.tau)
    if verdict.choice == "direct" or verdict.candidate is None:
        return first.direct_answer
    return decisions[verdict.candidate].rag_answer


def _multi_candidate_rows(runs: Sequence[DatasetRun], sources: Sequence[str]
                          ) -> tuple[list[list[str]], dict[str, Any]]:
    """Rows for TrustMargin over all candidates at once, and for their oracle."""
    if len(sources) < 2:
        return [], {}
    groups: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
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
    boots = _metric_boots(groups, [("multi", "bm25_tm")])
    f1, em = boots["f1"], boots["em"]
    d_f1, d_em = f1.differences["multi - bm25_tm"], em.differences["multi - bm25_tm"]
    rows = [[f"All {len(sources)} candidates + TrustMargin (multi)", str(f1.n), "",
             f"{f1.methods['multi'].mean:.2f} / {em.methods['multi'].mean:.2f}",
             f"{d_f1.mean:+.2f} {d_f1.ci()}", f"{d_em.mean:+.2f} {d_em.ci()}", "", ""],
            [f"Oracle(Direct, all {len(sources)} candidates)", str(f1.n),
             f"{f1.methods['oracle'].mean:.2f} / {em.methods['oracle'].mean:.2f}",
             "", "", "", "", ""]]
    return rows, {"f1": f1.as_dict(), "em": em.as_dict(), "sources": list(sources)}
