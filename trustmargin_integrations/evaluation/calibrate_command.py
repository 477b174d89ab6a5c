"""``trustmargin calibrate``: fit lambda_bind and tau on a run directory's cache and build the
policy file (:func:`calibrate_run`), and the plain-text summary it prints
(:func:`describe`). The fitting itself (grid, folds, held-out comparison) is
:mod:`trustmargin_integrations.evaluation.rule_fit`; the file model is
:mod:`trustmargin_integrations.policy_file`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustmargin_integrations._version import __version__
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import BEST_SINGLE, DEFAULT_RESAMPLES
from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    GradedDecision,
    score_records,
)
from trustmargin_integrations.evaluation.distinct import Distinct
from trustmargin_integrations.evaluation.rule_fit import (
    LAMBDAS,
    TAUS,
    CrossValidation,
    Problem,
    comparison_result,
    cross_validate,
    held_out_comparison,
    require_unique_ids,
    split_holdout,
)
from trustmargin_integrations.evaluation.rundir import DatasetRun, load_run
from trustmargin_integrations.policy_file import (
    OBJECTIVE_LABELS,
    ComparisonResult,
    FittedOn,
    Objective,
    PolicyFile,
    RetrievalSetup,
)
from trustmargin_integrations.rule import Policy


@dataclass(frozen=True)
class LoadedRun:
    """A run directory read and its records scored once, for callers that need the same
    records twice (the domain check fits the rule here, then chooses its policy).

    ``scored`` holds each distinct question once (:mod:`.distinct`): a later copy of a
    question, in its own dataset or another, is collapsed into the first, so nothing fitted,
    split or resampled counts it twice; ``repeats`` is the warning naming the copies (None
    when there were none).
    """

    name: str
    runs: list[DatasetRun]
    scored: dict[str, list[GradedDecision]]
    repeats: str | None = None

    @classmethod
    def read(cls, run_dir: str | Path) -> LoadedRun:
        """Read ``run_dir`` (written by ``trustmargin eval``) and score every record."""
        runs = load_run(run_dir)
        every = [(r.name, s) for r in runs
                 for s in score_records(r.records, whole_texts=r.chain_answers)]
        distinct = Distinct.of([s.decision.question for _, s in every])
        scored: dict[str, list[GradedDecision]] = {r.name: [] for r in runs}
        for position in distinct.kept:
            name, item = every[position]
            scored[name].append(item)
        # Copies of one cached result share its Decision; the manifest's ids tell them apart.
        ids = [f"{r.name}:{rec.example.id}" for r in runs for rec in r.records]
        return cls(Path(run_dir).resolve().name, runs,
                   {name: items for name, items in scored.items() if items},
                   distinct.warning(ids))


def calibrate_run(
    run_dir: str | Path | LoadedRun,
    *,
    objective: Objective = "f1",
    folds: int = 5,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    lambdas: Sequence[float] = LAMBDAS,
    taus: Sequence[float] = TAUS,
    holdout: float = 0.0,
    split_seed: int = 0,
) -> tuple[PolicyFile, CrossValidation | None]:
    """Fit lambda_bind and tau on a run directory's cache (cross-validated when folds >= 2).

    Args:
        run_dir: a directory written by ``trustmargin eval``, or one already read
            (:class:`LoadedRun`).
        objective: the mean maximized: ``f1``, ``em`` or ``contains`` (a gold answer stated
            in the text, for chat and long-form answers).
        folds: cross-validation folds (0 skips cross-validation).
        seed: seed of the fold shuffle and of the bootstrap.
        resamples: bootstrap resamples of the held-out comparison.
        holdout: share of each dataset's questions set aside before anything is fitted
            (cross-validation included); the file records the fitted ids and the fitted
            rule's scores on the held-out questions.
        split_seed: seed of the hold-out split.
    """
    loaded = run_dir if isinstance(run_dir, LoadedRun) else LoadedRun.read(run_dir)
    runs, scored = loaded.runs, loaded.scored
    problem = Problem(scored, objective, lambdas, taus)
    names = [problem.dataset_names[d] for d in problem.dataset]
    keep = split_holdout(names, holdout, split_seed)
    ids = [str(s.decision.id) for s in problem.scored]
    require_unique_ids(ids, holdout, "run_dir", "evaluate with `trustmargin eval` (it sets "
                       "dataset:test_id ids)")
    fit_on = [q for q in range(len(problem)) if keep[q]]
    held = [q for q in range(len(problem)) if not keep[q]]
    cv = cross_validate(problem, folds, seed, resamples, fit_on) if folds else None
    final = problem.fit(fit_on)
    decisions = [rec.decision for r in runs for rec in r.records]
    info = [r.info for r in runs]
    modes = sorted({str(i["retrieval"]) for i in info if i.get("retrieval")})
    top_ks = {int(i["top_k"]) for i in info if i.get("top_k") is not None}
    calibration = PolicyFile(
        model_id=_only({d.model_id for d in decisions}, "model"),
        dtype=_maybe_only({str(i["dtype"]) for i in info if i.get("dtype")}),
        backend_kind=_maybe_only({str(i["backend"]) for i in info if i.get("backend")}),
        backend_model=_maybe_only({str(i["backend_model"]) for i in info
                                   if i.get("backend_model")}),
        prompt_version=_only({d.prompt_version for d in decisions}, "prompt version"),
        retrieval=RetrievalSetup(mode=", ".join(modes) or None,
                                 top_k=top_ks.pop() if len(top_ks) == 1 else None),
        policy=Policy.fitted(final.lambda_bind, final.tau), objective=objective,
        score=final.score, default_score=final.default_score,
        grid={"lambdas": problem.lambdas, "taus": problem.taus},
        fitted_on=FittedOn(
            run_dir=loaded.name,
            datasets={n: sum(names[q] == n for q in fit_on) for n in dict.fromkeys(names)},
            n=len(fit_on), question_ids=[ids[q] for q in fit_on] if held else [],
            holdout=holdout, split_seed=split_seed if held else None),
        cv=cv.result(objective) if cv else None,
        held_out=comparison_result(held_out_comparison(problem, held, final, resamples, seed),
                                   objective) if held else None,
        scoring_form=_chain_form(runs),
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        package_version=__version__,
    )
    return calibration, cv


def _chain_form(runs: Sequence[DatasetRun]) -> Any:
    """The scoring form a run's chain answers were compared under (None: the model's own
    answers); a policy is chosen on one kind of answers, compared one way."""
    kinds = {r.chain_answers for r in runs}
    if len(kinds) > 1:
        raise InvalidInputError("run_dir", "mixes datasets of a chain's own answers "
                                "(direct_answer, rag_answer) with the model's own answers",
                                "check each kind in a run directory of its own")
    if not kinds.pop():
        return None
    return _only({str(r.info.get("scoring_form")) for r in runs}, "scoring form")


def _only(values: set[str], what: str) -> str:
    if len(values) != 1:
        raise InvalidInputError("run_dir", f"mixes {len(values)} values of the {what} "
                                f"({', '.join(sorted(values))})",
                                "calibrate on a run of one model and one prompt version")
    return next(iter(values))


def _maybe_only(values: set[str]) -> str | None:
    return next(iter(values)) if len(values) == 1 else (", ".join(sorted(values)) or None)


GRADED_BY: dict[Objective, str] = {
    "f1": "token F1 against the gold answers",
    "em": "exact match with a gold answer",
    "contains": "whether the text states a gold answer (normalized, as whole words)",
}
"""What each objective grades, as the printouts say it."""


def objective_line(objective: Objective) -> str:
    """The printouts' line naming the objective and what it grades."""
    return f"objective: {OBJECTIVE_LABELS[objective]}, {GRADED_BY[objective]}"


def describe(calibration: PolicyFile, cv: CrossValidation | None) -> list[str]:
    """Plain-text lines summarizing a calibration (what ``trustmargin calibrate`` prints)."""
    metric = OBJECTIVE_LABELS[calibration.objective]
    fitted = calibration.fitted_on
    lines = [f"model {calibration.model_id} ({calibration.dtype or 'dtype ?'}), prompts "
             f"{calibration.prompt_version}, retrieval {calibration.retrieval.mode} "
             f"top-{calibration.retrieval.top_k}",
             "fitted on: " + ", ".join(f"{k} {v}" for k, v in fitted.datasets.items()),
             objective_line(calibration.objective)]
    if cv is not None:
        lines += ["", f"{cv.folds}-fold cross-validation on those questions (stratified by "
                      f"dataset, seed {cv.seed}): held-out mean {metric} x100", ""]
        lines += comparison_lines(cv.result(calibration.objective))
        fits = ", ".join(f"({f.fit.lambda_bind:g}, {f.fit.tau:g})" for f in cv.fold_fits)
        lines += ["", f"  per-fold fits (lambda, tau): {fits}", "  " + cv.bootstrap.note()]
    scope = "all" if not fitted.holdout else "the"
    rule = calibration.policy
    lines += ["", f"final fit on {scope} {fitted.n} questions: lambda_bind = "
                  f"{rule.lambda_bind:g}, tau = {rule.tau:g} ({metric} "
                  f"{calibration.score:.2f} in-sample; defaults 0.5 / -1.5: "
                  f"{calibration.default_score:.2f})"]
    if cv is None and calibration.held_out is None:
        lines.append("  in-sample numbers are optimistic; --folds 5 estimates the held-out gain")
    if rule.lambda_bind == DEFAULT_LAMBDA and rule.tau == DEFAULT_TAU:
        lines.append("  the defaults are already optimal on these questions")
    if calibration.held_out is not None:
        held = calibration.held_out
        lines += ["", f"held out before fitting ({100 * fitted.holdout:g}% of each dataset, "
                      f"split seed {fitted.split_seed}): the final fit on "
                      + ", ".join(f"{k} {v}" for k, v in held.sizes.items())
                      + f" questions it never saw, mean {metric} x100", ""]
        lines += comparison_lines(held)
    return lines


def comparison_lines(result: ComparisonResult) -> list[str]:
    """Each method's mean and interval, then each difference with its interval (and the
    small-sample note where the sample is small)."""
    width = max(len(m) for m in result.methods)
    lines = [f"  {m:<{width}}  {v.mean:6.2f}  [{v.low:.2f}, {v.high:.2f}]"
             for m, v in result.methods.items()]
    lines.append("")
    for key, d in result.differences.items():
        label = key.replace(BEST_SINGLE, f"best single source ({d.versus})")
        lines.append(f"  {label:<44} {d.mean:+6.2f}  [{d.low:+.2f}, {d.high:+.2f}]  "
                     f"P(> 0) = {d.p_positive:.2f}")
    if result.small_sample:
        lines.append("  small sample: the intervals are wide and only approximate")
    return lines
