"""``trustmargin check`` on a run directory: the domain check (:func:`~.domain_check.check_policy`)
on the run's cached decisions, its policy file (the chosen policy, the fitted rule's
numbers and provenance, and the check's evidence), and the lines the command prints.

The generation and scoring that fill the run directory are ``trustmargin eval``'s
(:mod:`trustmargin_integrations.cli.evaluate`); nothing here loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trustmargin_integrations.evaluation.bootstrap import DEFAULT_RESAMPLES
from trustmargin_integrations.evaluation.calibrate_command import (
    LoadedRun,
    calibrate_run,
    comparison_lines,
    objective_line,
)
from trustmargin_integrations.evaluation.domain_check import (
    COMPANION,
    PolicyCheckResult,
    check_policy,
    require_questions,
)
from trustmargin_integrations.evaluation.policy_selection import (
    DEFAULT_CRITERION,
    DEFAULT_FOLDS,
    POLICY_KINDS,
    Criterion,
    PolicyTable,
)
from trustmargin_integrations.evaluation.rule_fit import (
    CV_METHODS,
    compare_on,
    comparison_result,
    require_unique_ids,
    split_holdout,
)
from trustmargin_integrations.policy_file import (
    FIT_FIELDS,
    OBJECTIVE_LABELS,
    ComparisonResult,
    Objective,
    PolicyFile,
)
from trustmargin_integrations.rule import Policy


def check_plan(datasets: Sequence[str], ids: Sequence[str], *, folds: int, holdout: float,
               split_seed: int, where: str = "questions",
               id_fix: str = "give every labeled question its own id") -> None:
    """Refuse questions the check cannot use, before anything is generated or fitted: too few
    distinct questions for the nested cross-validation (after the hold-out), a dataset the
    hold-out would leave with nothing to fit or test, or, under a hold-out, ids that repeat.

    Args:
        datasets: each distinct question's dataset, in order.
        ids: each distinct question's id, in order.
        folds: folds of both cross-validation levels.
        holdout: share of each dataset set aside (0: none).
        split_seed: seed of the hold-out split.
        where: the field an error names (the labeled file, or the run directory).
        id_fix: how to fix a repeated id.
    """
    keep = split_holdout(datasets, holdout, split_seed)
    require_questions(sum(keep), folds, where)
    require_unique_ids(ids, holdout, where, id_fix)


def check_run(run_dir: str | Path | LoadedRun, *, objective: Objective = "f1",
              folds: int = DEFAULT_FOLDS, seed: int = 0, resamples: int = DEFAULT_RESAMPLES,
              criterion: Criterion = DEFAULT_CRITERION, holdout: float = 0.0,
              split_seed: int = 0) -> tuple[PolicyCheckResult, PolicyFile]:
    """Choose the policy on a run directory's distinct questions (``run_dir`` may be one
    already read), and its policy file.

    The file's ``policy`` is the choice (with only the numbers it takes) and its ``evidence``
    the whole check result; the rule fit's in-sample numbers (what ``trustmargin calibrate``
    fits on the same questions) stay only when the choice is that fitted rule.

    With ``holdout`` > 0, that share of each dataset is set aside (seeded, as ``calibrate
    --holdout`` splits) before anything is chosen or fitted; the file then lists the ids it
    saw and records the chosen policy's scores on the held-out questions against the paper's
    rule and both single sources (``held_out``, "calibrated" being the chosen policy).
    """
    # Each distinct question once (LoadedRun): repeats would fake a significant verdict.
    loaded = run_dir if isinstance(run_dir, LoadedRun) else LoadedRun.read(run_dir)
    table_names = [name for name, items in loaded.scored.items() for _ in items]
    check_plan(table_names, [str(s.decision.id) for items in loaded.scored.values()
                             for s in items], folds=folds, holdout=holdout,
               split_seed=split_seed, where="run_dir",
               id_fix="evaluate with `trustmargin eval` (it sets dataset:test_id ids)")
    # The provenance (model, prompts, retrieval, fitted-on ids, the split) and the rule fit
    # are calibrate's; folds=0 skips its own cross-validation, which the check replaces.
    base, _ = calibrate_run(loaded, objective=objective, folds=0, seed=seed,
                            resamples=resamples, holdout=holdout, split_seed=split_seed)
    table = PolicyTable(loaded.scored, objective)
    keep = split_holdout(table.dataset_names, holdout, split_seed)
    fit_on = [q for q, kept in enumerate(keep) if kept]
    held = [q for q, kept in enumerate(keep) if not kept]
    result = check_policy(table, fit_on, folds=folds, seed=seed, criterion=criterion,
                          resamples=resamples)
    chosen = result.chosen
    fit = {} if chosen == base.policy else {name: None for name in FIT_FIELDS}
    calibration = PolicyFile.model_validate({
        **base.model_dump(),
        **fit,
        "policy": chosen,
        "evidence": result.model_dump(mode="json"),
        "held_out": _held_out(table, held, chosen, resamples, seed) if held else None,
    })
    return result, calibration


def _held_out(table: PolicyTable, held: list[int], chosen: Policy, resamples: int,
              seed: int) -> ComparisonResult:
    """The chosen policy ("calibrated") against the paper's rule and both single sources on
    the held-out questions, in the policy file's comparison shape."""
    full: dict[str, list[float]] = {m: [0.0] * len(table.problem) for m in CV_METHODS}
    for method, policy in (("calibrated", chosen), ("default", Policy.paper()),
                           ("direct", Policy.always_direct()), ("rag", Policy.always_rag())):
        values = table.values(table.chooses_rag(policy, held), held)
        for q, value in zip(held, values, strict=True):
            full[method][q] = float(value)
    return comparison_result(compare_on(table.problem, held, full, resamples, seed),
                             table.objective)


def answers_compared(calibration: PolicyFile) -> str:
    """Which answers the check ran on and how they were compared and graded."""
    if calibration.scoring_form is None:
        return ("answers: the model's own short answers (the paper's prompts), scored the "
                "paper's way")
    return (f"answers: your chain's own (direct_answer, rag_answer), compared under scoring "
            f"form {calibration.scoring_form!r} and graded whole; loading the policy applies "
            f"that form")


def describe_check(result: PolicyCheckResult, calibration: PolicyFile | None = None
                   ) -> list[str]:
    """What ``trustmargin check`` prints: the verdict first, then every candidate's
    cross-validated score, the nested estimate of the check itself and, when questions were
    held out, the chosen policy on them."""
    metric = OBJECTIVE_LABELS[result.objective]
    lines = [result.verdict, ""]
    if calibration is not None:
        lines += [answers_compared(calibration)]
    lines += [f"{objective_line(result.objective)}; "
              f"{OBJECTIVE_LABELS[COMPANION[result.objective]]} reported beside it", ""]
    lines += [f"candidate policies ({result.folds}-fold cross-validation on {result.n} labeled "
             f"questions, seed {result.seed}; mean x100, 95% interval):", ""]
    width = max(len(result.candidates[k].policy.label) for k in POLICY_KINDS)
    metrics = (result.objective, COMPANION[result.objective])  # the objective first
    for kind in POLICY_KINDS:
        c = result.candidates[kind]
        mark = "*" if c.policy == result.chosen else " "
        cells = [f"{OBJECTIVE_LABELS[m]} {e.mean:6.2f} [{e.low:6.2f}, {e.high:6.2f}]"
                 for m in metrics if (e := c.score(m)) is not None]
        lines.append(f" {mark} {c.policy.label:<{width}}  " + "  ".join(cells))
    nested = result.nested
    vs = nested.versus_fallback
    lines += ["", f"the check itself on questions its choice never saw (nested "
                  f"cross-validation): {metric} {nested.score.mean:.2f} "
                  f"[{nested.score.low:.2f}, {nested.score.high:.2f}], {vs.mean:+.2f} "
                  f"[{vs.low:+.2f}, {vs.high:+.2f}] vs {vs.versus}",
              f"criterion {result.criterion!r}: a margin rule is kept only when its "
              f"cross-validated gain over the fallback has a positive lower bound"]
    held = calibration.held_out if calibration is not None else None
    if held is not None:
        lines += ["", "held out before choosing: the chosen policy ('calibrated') on "
                      + ", ".join(f"{k} {v}" for k, v in held.sizes.items())
                      + f" questions it never saw, mean {metric} x100", ""]
        lines += comparison_lines(held)
    return lines


def next_step(calibration: PolicyFile, loaded: LoadedRun) -> str | None:
    """What to do after a verdict that keeps one side (None: a margin rule was kept, and
    loading the policy is the next step): drop the wrapper, or keep it under this policy
    (it then runs only the kept side), with the cost per question measured on these records
    that either saves."""
    side = calibration.decision_policy.fixed_side
    if side is None:
        return None
    timings = [s.decision.timings for items in loaded.scored.values() for s in items]
    n = max(len(timings), 1)
    scoring = sum(t.comparing_s + t.scoring_s for t in timings) / n
    other = "closed-book" if side == "rag" else "retrieval-augmented"
    generating = sum((t.generate_direct_s if side == "rag" else t.generate_rag_s)
                     for t in timings) / n
    cost = f"{scoring:.2f} s of scoring per question here"
    if generating > 0:
        cost += f" plus {generating:.2f} s generating the {other} answer"
    kept = "your chain as it is" if side == "rag" else "your chain's closed-book answer"
    return (f"next: the answer is {kept}; remove the TrustMargin wrapper, or keep it loaded "
            f"with this policy (it then runs only that side and scores nothing); either saves "
            f"the {other} run and the scoring ({cost}).")
