"""The rule with a fitted (lambda_bind, tau), always measured on questions the fit did not
see: 5-fold cross-validation over the run (every question scored by a fit on the other
folds), and, given a policy file, that file's lambda and tau on the run's questions
outside the file's fit (``fitted_on.question_ids``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trustmargin_integrations.evaluation.bootstrap import BEST_SINGLE, comparison_key
from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    METHOD_LABELS,
    GradedDecision,
    per_question_scores,
)
from trustmargin_integrations.evaluation.report.formatting import (
    MethodScores,
    dataset_label,
    f1_cells,
    f1_difference,
    markdown_table,
    metric_boots,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section
from trustmargin_integrations.evaluation.rule_fit import Problem, cross_validate
from trustmargin_integrations.policy_file import PolicyFile
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import replay_winner

CALIBRATED_METHODS = ("direct", "rag", "default", "calibrated", "oracle")
CALIBRATED_COMPARISONS = [("calibrated", "default"), ("calibrated", BEST_SINGLE)]
CV_FOLDS = 5
CV_SEED = 0
_LABELS = {**METHOD_LABELS, "default": "TrustMargin (0.5, -1.5)",
           "calibrated": "TrustMargin, calibrated"}
_HEADER = ["", "n", *(f"{_LABELS[m]} F1" for m in CALIBRATED_METHODS),
           "calibrated - default", "calibrated - best single"]


def section(view: RunView) -> Section:
    """The calibrated rule on unseen questions: cross-validated, and a given file held out."""
    summary: dict[str, Any] = {}
    lines = _cross_validated(view.scored, summary)
    if view.calibration is not None:
        lines += _policy_file_section(view.scored, view.calibration, summary)
    if not lines:
        return Section([], {"calibrated": {}})
    lines = ["", "## Calibrated rule (on questions the fit did not see)", "", *lines,
             f"F1 x100 with 95% paired bootstrap intervals (10,000 resamples, seed 0); "
             f"TrustMargin (0.5, -1.5) is the paper's default rule on the same questions, "
             f"lambda {DEFAULT_LAMBDA:g}, tau {DEFAULT_TAU:g}. The Avg row resamples each "
             "dataset within itself. An interval that contains 0 means the sample cannot "
             "tell the calibrated rule from the other."]
    return Section(lines, {"calibrated": summary})


def _cross_validated(scored: Mapping[str, Sequence[GradedDecision]],
                     summary: dict[str, Any]) -> list[str]:
    """Each question decided by the fit on the other folds (nothing for tiny runs)."""
    total = sum(len(v) for v in scored.values())
    if total < 2 * CV_FOLDS:
        return []
    cv = cross_validate(Problem(scored, "f1"), CV_FOLDS, CV_SEED, resamples=1)
    fit_of = {q: Policy.fitted(f.fit.lambda_bind, f.fit.tau) for f in cv.fold_fits
              for q in f.test}
    groups, start = {}, 0
    for name, items in scored.items():
        chosen = [fit_of[q] for q in range(start, start + len(items))]
        groups[name] = _with_calibrated(items, chosen)
        start += len(items)
    rows, summary["cross_validated"] = _calibrated_rows(groups)
    fits = ", ".join(f"({f.fit.lambda_bind:g}, {f.fit.tau:g})" for f in cv.fold_fits)
    return [f"**{CV_FOLDS}-fold cross-validation over this run** (folds stratified by "
            f"dataset, seed {CV_SEED}; objective: average F1; each question is decided "
            "with the lambda and tau fitted on the other folds; per-fold fits "
            f"(lambda, tau): {fits}):", "", *markdown_table(_HEADER, rows), ""]


def _policy_file_section(scored: Mapping[str, Sequence[GradedDecision]], calibration: PolicyFile,
                      summary: dict[str, Any]) -> list[str]:
    """A policy file's constant rule on the run's questions outside its fit."""
    calibration.check(_only_model(scored), PROMPT_VERSION)
    fitted = set(calibration.fitted_on.question_ids)
    held = {n: [s for s in items if str(s.decision.id) not in fitted]
            for n, items in scored.items()}
    held = {n: items for n, items in held.items() if items}
    where = (f"the {sum(map(len, held.values()))} questions of this run outside its fit "
             f"({len(fitted)} ids listed in the file)" if fitted else
             "all questions of this run: the file lists no fitted ids, so some of them "
             "may be in its fit and this row may be optimistic")
    policy = calibration.decision_policy
    lines = [f"**Policy file** (policy {policy.label}; fitted on "
             f"{calibration.fitted_on.n} questions of run {calibration.fitted_on.run_dir}) on "
             f"{where}:", ""]
    if not held:
        return [*lines, "(no question of this run lies outside the fit)", ""]
    groups = {n: _with_calibrated(items, [policy] * len(items)) for n, items in held.items()}
    rows, summary["calibration_file"] = _calibrated_rows(groups)
    summary["calibration_file"]["policy"] = policy.setting
    return [*lines, *markdown_table(_HEADER, rows), ""]


def _calibrated_rows(groups: Mapping[str, MethodScores]
                     ) -> tuple[list[list[str]], dict[str, Any]]:
    rows, summary = [], {}
    scopes: list[tuple[str, Mapping[str, MethodScores]]] = [(n, {n: g})
                                                            for n, g in groups.items()]
    if len(groups) > 1:
        scopes.append(("average", groups))
    for name, data in scopes:
        boots = metric_boots(data, CALIBRATED_COMPARISONS)
        n = sum(len(next(iter(g.values()))[0]) for g in data.values())
        rows.append([dataset_label(name) if name != "average" else "Avg", str(n),
                     *f1_cells(boots, CALIBRATED_METHODS),
                     f1_difference(boots, comparison_key("calibrated", "default")),
                     f1_difference(boots, comparison_key("calibrated", BEST_SINGLE))])
        summary[name] = {m: b.as_dict() for m, b in boots.items()}
    return rows, summary


def _with_calibrated(subset: Sequence[GradedDecision], chosen: Sequence[Policy]
                     ) -> dict[str, tuple[list[float], list[float]]]:
    """Per-question (F1, EM) of the fixed methods plus the calibrated ``chosen`` policy per
    question (a fold's fitted rule, or a policy file's policy)."""
    base = per_question_scores(subset, methods=("direct", "rag", "trustmargin", "oracle"))
    f1s, ems = [], []
    for s, policy in zip(subset, chosen, strict=True):
        choice = "direct" if replay_winner(s.decision, policy) is None else "rag"
        f1s.append(s.f1(choice))
        ems.append(s.em(choice))
    return {"direct": base["direct"], "rag": base["rag"], "default": base["trustmargin"],
            "calibrated": (f1s, ems), "oracle": base["oracle"]}


def _only_model(scored: Mapping[str, Sequence[GradedDecision]]) -> str:
    models = sorted({s.decision.model_id for items in scored.values() for s in items})
    return models[0] if len(models) == 1 else ", ".join(models)
