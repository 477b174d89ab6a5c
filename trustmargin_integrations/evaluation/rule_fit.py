"""Calibrating lambda_bind and tau on an eval run's cached Decisions (no model calls).

The rule stays the paper's (RAG iff ``M_prior + lambda_bind * M_bind > tau``); its two numbers
are fitted over the grid :data:`LAMBDAS` x :data:`TAUS` by the mean F1 (or EM, or
``contains``) of the replayed choices, per-dataset means averaged, ties going to the cell
nearest the paper's (0.5, -1.5). :func:`cross_validate` estimates what the fit buys on unseen
questions; ``holdout`` sets a share aside first (how the shipped policy files were made).
The fit's result is a :class:`~trustmargin_integrations.policy_file.PolicyFile`.
The grid and tie rule's reasons: docs/decisions.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    DEFAULT_RESAMPLES,
    Bootstrap,
    check_seed,
    grouped_bootstrap,
)
from trustmargin_integrations.evaluation.diagnostics import (
    DEFAULT_LAMBDA,
    DEFAULT_TAU,
    GradedDecision,
)
from trustmargin_integrations.policy_file import (
    ComparisonResult,
    CrossValidationResult,
    DifferenceResult,
    FoldResult,
    IntervalResult,
    Objective,
    check_objective,
)
from trustmargin_integrations.rule import SETTLED, Rule
from trustmargin_integrations.rule.replay import replay

LAMBDAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(21))
"""lambda_bind grid: 0, 0.1, ..., 2.0."""
TAUS: tuple[float, ...] = tuple(round(-5.0 + 0.05 * i, 2) for i in range(161))
"""tau grid: -5, -4.95, ..., 3."""
CV_METHODS = ("calibrated", "default", "direct", "rag")
_TIE = 9  # objective values equal to 9 decimals (on 0..1) are ties


# -- fitting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """The best grid cell on some questions: (lambda_bind, tau) and its objective (x100)."""

    lambda_bind: float
    tau: float
    score: float
    default_score: float


def side_scores(scored: Sequence[GradedDecision], metric: Objective
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per-question (Direct, RAG) scores (0..1) of ``scored`` under ``metric``."""
    sides = np.array([s.sides(metric) for s in scored], dtype=float).reshape(-1, 2)
    return sides[:, 0], sides[:, 1]


class Problem:
    """The questions of a calibration: per-question candidate scores and replayed choices.

    ``rag[q, i, j]`` is True when the rule at ``lambdas[i]`` and ``taus[j]`` keeps question
    ``q``'s RAG answer (as ``replay(decision, lambda_bind=lambdas[i], tau=taus[j])`` does); it
    is computed once and shared by every fit on a subset.
    """

    def __init__(self, scored_by_dataset: Mapping[str, Sequence[GradedDecision]],
                 objective: Objective = "f1", lambdas: Sequence[float] = LAMBDAS,
                 taus: Sequence[float] = TAUS) -> None:
        objective = check_objective(objective)
        if not lambdas or not taus:
            raise InvalidInputError("grid", "is empty", "pass at least one lambda and tau")
        self.objective: Objective = objective
        self.lambdas = [float(v) for v in lambdas]
        self.taus = [float(v) for v in taus]
        self.scored = [s for items in scored_by_dataset.values() for s in items]
        if not self.scored:
            raise InvalidInputError("run_dir", "holds no question", "evaluate some questions")
        if any(len(s.decision.rag_candidates) > 1 for s in self.scored):
            # A candidate's score is fixed per question here; with several RAG candidates
            # the kept one changes with lambda and tau, which this table cannot express.
            raise InvalidInputError("run_dir", "holds multi-candidate decisions",
                                    "calibrate on a pairwise run (trustmargin eval)")
        self.dataset_names = list(scored_by_dataset)
        self.dataset = np.array([k for k, items in enumerate(scored_by_dataset.values())
                                 for _ in items])
        self.direct, self.rag_score = side_scores(self.scored, objective)
        self.rag = np.empty((len(self.scored), len(self.lambdas), len(self.taus)), dtype=bool)
        for q, s in enumerate(self.scored):
            d = s.decision
            if d.reason in SETTLED or d.m_prior is None or d.m_bind is None:
                # No lambda or tau changes a settled decision (replay raises on a scored
                # decision without margins, as it should).
                self.rag[q] = replay(d) == "rag"
            else:
                # The rule on the whole grid at once (what rule.replay.replay computes cell
                # by cell; test_calibration checks they agree).
                self.rag[q] = Rule.keeps_rag_grid(d.m_prior, d.m_bind, self.lambdas, self.taus)

    def __len__(self) -> int:
        return len(self.scored)

    def score(self, choices: Sequence[str], index: Sequence[int]) -> float:
        """Objective (0..1) of given choices on questions ``index``: mean of dataset means."""
        values = np.array([self.rag_score[q] if c == "rag" else self.direct[q]
                           for q, c in zip(index, choices, strict=True)])
        groups = self.dataset[np.asarray(index)]
        return float(np.mean([values[groups == d].mean() for d in np.unique(groups)]))

    def grid_scores(self, index: Sequence[int]) -> np.ndarray:
        """Objective (0..1) of every grid cell on questions ``index`` (lambdas x taus)."""
        idx = np.asarray(index, dtype=int)
        if idx.size == 0:
            raise InvalidInputError("index", "is empty", "fit on at least one question")
        groups = self.dataset[idx]
        means = []
        for d in np.unique(groups):
            sel = idx[groups == d]
            gain = np.tensordot(self.rag_score[sel] - self.direct[sel],
                                self.rag[sel].astype(float), axes=(0, 0))
            means.append((self.direct[sel].sum() + gain) / sel.size)
        return np.mean(means, axis=0)

    def fit(self, index: Sequence[int] | None = None) -> Fit:
        """The best cell on questions ``index`` (default: all); ties toward the defaults."""
        idx = np.arange(len(self)) if index is None else np.asarray(index, dtype=int)
        raw = self.grid_scores(idx)
        grid = np.round(raw, _TIE)
        best = grid.max()
        cells = [(i, j) for i, j in zip(*np.nonzero(grid == best), strict=True)]
        i, j = min(cells, key=lambda ij: (abs(self.lambdas[ij[0]] - DEFAULT_LAMBDA)
                                          + abs(self.taus[ij[1]] - DEFAULT_TAU), ij))
        lam, tau = self.lambdas[i], self.taus[j]
        default = self.score([replay(self.scored[q].decision, lambda_bind=DEFAULT_LAMBDA,
                                     tau=DEFAULT_TAU) for q in idx], idx)
        return Fit(lam, tau, 100 * float(raw[i, j]), 100 * default)

    def chosen_scores(self, index: Sequence[int], lambda_bind: float, tau: float
                      ) -> list[float]:
        """Per-question score (0..1) of the rule replayed at ``lambda_bind`` and ``tau`` on
        ``index``."""
        return [float(self.rag_score[q]
                      if replay(self.scored[q].decision, lambda_bind=lambda_bind, tau=tau) == "rag"
                      else self.direct[q]) for q in index]


def assign_folds(datasets: Sequence[str], folds: int, seed: int) -> list[int]:
    """Fold of every question: each dataset shuffled (seeded) and dealt round-robin.

    The deal continues across datasets, so with at least ``folds`` questions no fold is
    empty, and every dataset is spread evenly over the folds (stratified).
    """
    if folds < 2:
        raise InvalidInputError("--folds", f"must be >= 2, got {folds}", "use 5 (the default)")
    check_seed(seed, "--seed")
    if len(datasets) < folds:
        raise InvalidInputError("--folds", f"{folds} folds need at least {folds} questions, "
                                f"the run has {len(datasets)}", "lower --folds")
    rng = np.random.default_rng(seed)
    out = [-1] * len(datasets)
    dealt = 0
    for name in dict.fromkeys(datasets):
        members = [q for q, d in enumerate(datasets) if d == name]
        for q in rng.permutation(members):
            out[int(q)] = dealt % folds
            dealt += 1
    return out


def split_holdout(datasets: Sequence[str], holdout: float, seed: int) -> list[bool]:
    """Which questions the fit may use (True) and which are held out (False).

    Each dataset is shuffled (seeded) on its own and ``round(holdout * n)`` of its questions
    are held out, so both parts keep the run's mix of datasets.
    """
    if not 0 <= holdout < 1:
        raise InvalidInputError("--holdout", f"must be in [0, 1), got {holdout}",
                                "use 0.5 to fit on half and report on the other half")
    check_seed(seed, "--split-seed")
    rng = np.random.default_rng(seed)
    keep = [True] * len(datasets)
    for name in dict.fromkeys(datasets):
        members = [q for q, d in enumerate(datasets) if d == name]
        held = round(holdout * len(members))
        if holdout and (held == 0 or held == len(members)):
            raise InvalidInputError("--holdout", f"leaves dataset {name!r} ({len(members)} "
                                    "questions) with nothing to fit or nothing to test",
                                    "evaluate more questions or change --holdout")
        for q in rng.permutation(members)[:held]:
            keep[int(q)] = False
    return keep


def require_unique_ids(ids: Sequence[str], holdout: float, where: str, fix: str) -> None:
    """Under a hold-out split the policy file lists the ids it was fitted on, so an id
    that repeats would name a held-out question as a fitted one: refuse it (checked before
    anything is fitted, and by ``trustmargin check`` before anything is generated)."""
    if not holdout:
        return
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            raise InvalidInputError(where, f"holds the id {ident!r} more than once, so the "
                                    "held-out questions cannot be named", fix)
        seen.add(ident)


@dataclass(frozen=True)
class FoldFit:
    """One fold's fit and the questions it was trained and scored on."""

    fold: int
    train: tuple[int, ...]
    test: tuple[int, ...]
    fit: Fit


@dataclass(frozen=True)
class CrossValidation:
    """Held-out predictions of every question, each from a fit that never saw it."""

    folds: int
    seed: int
    fold_fits: list[FoldFit]
    held_out: dict[str, list[float]]  # method -> per-question score (0..1), question order
    bootstrap: Bootstrap

    def result(self, objective: Objective) -> CrossValidationResult:
        """The JSON-ready summary stored in the policy file."""
        return CrossValidationResult(
            **comparison_result(self.bootstrap, objective).model_dump(), folds=self.folds,
            fold_fits=[FoldResult(lambda_bind=f.fit.lambda_bind, tau=f.fit.tau,
                                  n_train=len(f.train), n_test=len(f.test))
                       for f in self.fold_fits])


def comparison_result(b: Bootstrap, objective: Objective) -> ComparisonResult:
    """The JSON-ready form of a bootstrap of the calibration comparisons."""
    return ComparisonResult(
        seed=b.seed, objective=objective, resamples=b.resamples, n=b.n, sizes=dict(b.sizes),
        methods={m: IntervalResult(mean=v.mean, low=v.low, high=v.high)
                 for m, v in b.methods.items()},
        differences={k: DifferenceResult(mean=v.mean, low=v.low, high=v.high, versus=v.b,
                                         p_positive=v.p_positive)
                     for k, v in b.differences.items()},
        small_sample=b.small_sample)


CV_COMPARISONS = [("calibrated", "default"), ("calibrated", BEST_SINGLE),
                  ("calibrated", "direct"), ("calibrated", "rag")]


def cross_validate(problem: Problem, folds: int = 5, seed: int = 0,
                   resamples: int = DEFAULT_RESAMPLES,
                   index: Sequence[int] | None = None) -> CrossValidation:
    """k-fold cross-validation of the calibration (see the module docstring).

    ``index``: the questions to cross-validate on (default: all); the others are never
    fitted on nor scored (``held_out`` keeps their slots at 0).
    """
    pool = list(range(len(problem))) if index is None else [int(q) for q in index]
    names = [problem.dataset_names[problem.dataset[q]] for q in pool]
    assignment = dict(zip(pool, assign_folds(names, folds, seed), strict=True))
    held: dict[str, list[float]] = {m: [0.0] * len(problem) for m in CV_METHODS}
    fold_fits = []
    for k in range(folds):
        test = [q for q in pool if assignment[q] == k]
        train = [q for q in pool if assignment[q] != k]
        fit = problem.fit(train)
        fold_fits.append(FoldFit(k, tuple(train), tuple(test), fit))
        for method, values in compared_scores(problem, test, fit).items():
            for q, value in zip(test, values, strict=True):
                held[method][q] = value
    boot = compare_on(problem, pool, {m: held[m] for m in CV_METHODS}, resamples, seed)
    return CrossValidation(folds, seed, fold_fits, held, boot)


def compared_scores(problem: Problem, index: Sequence[int], fit: Fit) -> dict[str, list[float]]:
    """Per-question scores (0..1) on ``index`` of the fitted rule, the defaults and both
    single sources."""
    return {"calibrated": problem.chosen_scores(index, fit.lambda_bind, fit.tau),
            "default": problem.chosen_scores(index, DEFAULT_LAMBDA, DEFAULT_TAU),
            "direct": [float(problem.direct[q]) for q in index],
            "rag": [float(problem.rag_score[q]) for q in index]}


def compare_on(problem: Problem, index: Sequence[int], scores: Mapping[str, Sequence[float]],
               resamples: int, seed: int) -> Bootstrap:
    """Grouped (by dataset) paired bootstrap of ``scores`` (full-length, question order) on
    the questions ``index``."""
    names = {q: problem.dataset_names[problem.dataset[q]] for q in index}
    groups = {name: {m: [scores[m][q] for q in index if names[q] == name] for m in scores}
              for name in problem.dataset_names if name in names.values()}
    return grouped_bootstrap(groups, CV_COMPARISONS, resamples=resamples, seed=seed)


def held_out_comparison(problem: Problem, index: Sequence[int], fit: Fit, resamples: int,
                        seed: int) -> Bootstrap:
    """The fitted rule against the defaults and the single sources on questions ``index``."""
    full: dict[str, list[float]] = {m: [0.0] * len(problem) for m in CV_METHODS}
    for method, values in compared_scores(problem, index, fit).items():
        for q, value in zip(index, values, strict=True):
            full[method][q] = value
    return compare_on(problem, index, full, resamples, seed)
