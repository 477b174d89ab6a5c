"""``trustmargin check`` on a run directory: the domain check (:func:`~.policy_check.check_policy`)
on the run's cached decisions, its calibration file (the chosen policy, the fitted rule's
numbers and provenance, and the check's evidence), and the lines the command prints.

The generation and scoring that fill the run directory are ``trustmargin eval``'s
(:mod:`trustmargin_integrations.cli.evaluate`); nothing here loads a model.
"""

from __future__ import annotations

from pathlib import Path

from trustmargin_integrations.calibration import Calibration, Objective
from trustmargin_integrations.evaluation.bootstrap import DEFAULT_RESAMPLES
from trustmargin_integrations.evaluation.calibrate import calibrate_run
from trustmargin_integrations.evaluation.diagnostics import score_records
from trustmargin_integrations.evaluation.policy import (
    DEFAULT_CRITERION,
    DEFAULT_FOLDS,
    Criterion,
    PolicyTable,
)
from trustmargin_integrations.evaluation.policy_check import PolicyCheckResult, check_policy
from trustmargin_integrations.evaluation.rundir import load_run
from trustmargin_integrations.policies import POLICY_KINDS


def check_run(run_dir: str | Path, *, objective: Objective = "f1", folds: int = DEFAULT_FOLDS,
              seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
              criterion: Criterion = DEFAULT_CRITERION
              ) -> tuple[PolicyCheckResult, Calibration]:
    """Choose the policy on every question of a run directory, and its calibration file.

    The file's ``lambda_bind`` and ``tau`` are the chosen policy's numbers where it has them,
    else the rule fitted on all the questions (what ``trustmargin calibrate`` fits); its
    ``policy`` is the choice and its ``evidence`` the whole check result.
    """
    runs = load_run(run_dir)
    table = PolicyTable({r.name: score_records(r.records) for r in runs}, objective)
    result = check_policy(table, folds=folds, seed=seed, criterion=criterion,
                          resamples=resamples)
    # The provenance (model, prompts, retrieval, fitted-on) and the fit on all questions are
    # calibrate's; folds=0 skips its own cross-validation, which the check replaces.
    base, _ = calibrate_run(run_dir, objective=objective, folds=0, seed=seed,
                            resamples=resamples)
    chosen = result.chosen
    calibration = Calibration.model_validate({
        **base.model_dump(),
        "lambda_bind": base.lambda_bind if chosen.lambda_bind is None else chosen.lambda_bind,
        "tau": base.tau if chosen.tau is None else chosen.tau,
        "policy": chosen,
        "evidence": result.model_dump(mode="json"),
    })
    return result, calibration


def describe_check(result: PolicyCheckResult) -> list[str]:
    """What ``trustmargin check`` prints: the verdict first, then every candidate's
    cross-validated score and the nested estimate of the check itself."""
    metric = result.objective.upper()
    lines = [result.verdict, "",
             f"candidate policies ({result.folds}-fold cross-validation on {result.n} labeled "
             f"questions, seed {result.seed}; mean x100, 95% interval):", ""]
    width = max(len(result.candidates[k].policy.label) for k in POLICY_KINDS)
    for kind in POLICY_KINDS:
        c = result.candidates[kind]
        mark = "*" if c.policy == result.chosen else " "
        lines.append(f" {mark} {c.policy.label:<{width}}  F1 {c.f1.mean:6.2f} "
                     f"[{c.f1.low:6.2f}, {c.f1.high:6.2f}]  EM {c.em.mean:6.2f} "
                     f"[{c.em.low:6.2f}, {c.em.high:6.2f}]")
    nested = result.nested
    vs = nested.versus_fallback
    lines += ["", f"the check itself on questions its choice never saw (nested "
                  f"cross-validation): {metric} {nested.score.mean:.2f} "
                  f"[{nested.score.low:.2f}, {nested.score.high:.2f}], {vs.mean:+.2f} "
                  f"[{vs.low:+.2f}, {vs.high:+.2f}] vs {vs.versus}",
              f"criterion {result.criterion!r}: a margin rule is kept only when its "
              f"cross-validated gain over the fallback has a positive lower bound"]
    return lines
