"""Calibrating lambda_bind and tau on an eval run's cached Decisions (no model calls).

The rule stays the paper's (two margins, one threshold: RAG iff
``M_prior + lambda_bind * M_bind > tau``); only its two numbers are fitted, by maximizing the
mean F1 (or EM) of ``Decision.replay(lambda_bind, tau)`` over a grid:

* lambdas :data:`LAMBDAS` = 0, 0.1, ..., 2.0; taus :data:`TAUS` = -5, -4.95, ..., 3 (a 0.05
  grid). Both contain the paper's defaults (0.5, -1.5).
* With several datasets the objective is the paper's "Average": the mean of the per-dataset
  means, so every dataset weighs the same.
* Ties (within 1e-9) go to the cell nearest the defaults (smallest
  ``|lambda - 0.5| + |tau + 1.5|``), then to the smaller lambda, then the smaller tau: with no
  evidence against them, the defaults stay.

Every choice is made by ``Decision.replay`` (the one rule of :mod:`..margins`); the table of
choices over the grid is built once per run and reused by every fold.

:func:`cross_validate` estimates what calibration buys on unseen questions: k folds stratified
by dataset (seeded shuffle), a fit on k-1 folds scores the held-out fold, and the pooled
held-out predictions of the calibrated rule, the default rule, Direct and RAG are compared
with paired bootstrap intervals. :func:`calibrate_run` then fits on all questions and returns
a :class:`Calibration`, the JSON file ``TrustMargin.from_pretrained(..., calibration=path)``
loads.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    DEFAULT_RESAMPLES,
    Bootstrap,
    grouped_bootstrap,
)
from trustmargin_integrations.evaluation.diagnostics import DEFAULT_LAMBDA, DEFAULT_TAU, Scored

Objective = Literal["f1", "em"]

LAMBDAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(21))
"""lambda_bind grid: 0, 0.1, ..., 2.0."""
TAUS: tuple[float, ...] = tuple(round(-5.0 + 0.05 * i, 2) for i in range(161))
"""tau grid: -5, -4.95, ..., 3."""
CV_METHODS = ("calibrated", "default", "direct", "rag")
_TIE = 9  # objective values equal to 9 decimals (on 0..1) are ties
_NUMBER_LIST = re.compile(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]")


class IntervalResult(BaseModel):
    """A cross-validated mean (x100) with its bootstrap interval."""

    model_config = ConfigDict(extra="forbid")

    mean: float
    low: float
    high: float


class DifferenceResult(IntervalResult):
    """A paired difference (x100): interval and share of resamples above zero."""

    versus: str = Field(description="The method subtracted (best_single resolved).")
    p_positive: float


class FoldResult(BaseModel):
    """One fold: the fit on the other folds and the questions it was scored on."""

    model_config = ConfigDict(extra="forbid")

    lambda_bind: float
    tau: float
    n_train: int
    n_test: int


class CrossValidationResult(BaseModel):
    """k-fold estimate of the calibrated rule against the default rule and single sources."""

    model_config = ConfigDict(extra="forbid")

    folds: int
    seed: int
    objective: Objective
    resamples: int
    n: int
    methods: dict[str, IntervalResult] = Field(
        description="calibrated (held-out), default (0.5, -1.5), direct, rag: x100.")
    differences: dict[str, DifferenceResult]
    fold_fits: list[FoldResult]
    small_sample: bool


class RetrievalSetup(BaseModel):
    """How the run retrieved its evidence (from the run's manifest)."""

    model_config = ConfigDict(extra="forbid")

    mode: str | None = Field(None, description="e.g. precomputed, bm25:corpus.json")
    top_k: int | None = None


class FittedOn(BaseModel):
    """Which questions the final fit saw."""

    model_config = ConfigDict(extra="forbid")

    run_dir: str
    datasets: dict[str, int] = Field(description="Dataset name -> number of questions.")
    n: int


class Calibration(BaseModel):
    """A fitted (lambda_bind, tau) for one model and prompt version, with its provenance.

    Load it with :meth:`load`; ``TrustMargin.from_pretrained(model, calibration=path)``
    checks it against the loaded model (:meth:`check`) and applies it (:meth:`apply`).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model_id: str
    dtype: str | None = None
    prompt_version: str
    retrieval: RetrievalSetup = Field(default_factory=RetrievalSetup)
    lambda_bind: float
    tau: float
    objective: Objective
    score: float = Field(description="Objective (x100) of the fit on the questions it saw.")
    default_score: float = Field(description="Objective (x100) of the paper's defaults on "
                                             "the same questions.")
    grid: dict[str, list[float]] = Field(description="The lambdas and taus searched.")
    fitted_on: FittedOn
    cv: CrossValidationResult | None = None
    created_at: str
    package_version: str

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration file written by ``trustmargin calibrate``."""
        file = Path(path)
        if not file.is_file():
            raise InvalidInputError("calibration", f"{file} does not exist",
                                    "pass the file written by `trustmargin calibrate RUN_DIR`")
        try:
            return cls.model_validate_json(file.read_text(encoding="utf-8"))
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "file"
            raise InvalidInputError("calibration", f"{file} is not a calibration file "
                                    f"({where}: {problem['msg'].lower()})",
                                    "re-create it with `trustmargin calibrate RUN_DIR`"
                                    ) from None

    @classmethod
    def coerce(cls, value: str | Path | Calibration) -> Calibration:
        """A Calibration, or the one stored at a path."""
        return value if isinstance(value, Calibration) else cls.load(value)

    def save(self, path: str | Path) -> Path:
        """Write the calibration as indented JSON; return the path."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.model_dump(mode="json"), indent=1)
        # One line per list of numbers (the grid), not one line per number.
        text = _NUMBER_LIST.sub(lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", text)
        file.write_text(text + "\n", encoding="utf-8")
        return file

    def check(self, model_id: str, prompt_version: str) -> None:
        """Refuse a model or prompt version other than the one the fit was made with.

        Margins are log-likelihood differences of one model under one set of prompts; a
        threshold fitted on another model's margins has no meaning for this one.
        """
        if model_id != self.model_id:
            raise InvalidInputError(
                "calibration", f"was fitted for model {self.model_id!r}, not {model_id!r}",
                f"load {self.model_id!r}, or calibrate on a run of {model_id!r}: "
                f"`trustmargin eval --model ...` then `trustmargin calibrate RUN_DIR`")
        if prompt_version != self.prompt_version:
            raise InvalidInputError(
                "calibration", f"was fitted with prompt version {self.prompt_version!r}, "
                f"this package uses {prompt_version!r}",
                "re-run `trustmargin eval` with this package, then `trustmargin calibrate`")

    def apply(self, config: TrustMarginConfig | None = None) -> TrustMarginConfig:
        """``config`` (default: the paper's) with the fitted lambda_bind and tau, validated."""
        base = config or TrustMarginConfig()
        updated = base.model_copy(update={"lambda_bind": self.lambda_bind, "tau": self.tau})
        return TrustMarginConfig.model_validate(updated.model_dump())


# -- fitting ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """The best grid cell on some questions: (lambda_bind, tau) and its objective (x100)."""

    lambda_bind: float
    tau: float
    score: float
    default_score: float


class Problem:
    """The questions of a calibration: per-question candidate scores and replayed choices.

    ``rag[q, i, j]`` is True when ``Decision.replay(lambdas[i], taus[j])`` keeps question
    ``q``'s RAG answer; it is computed once and shared by every fit on a subset.
    """

    def __init__(self, scored_by_dataset: Mapping[str, Sequence[Scored]],
                 objective: Objective = "f1", lambdas: Sequence[float] = LAMBDAS,
                 taus: Sequence[float] = TAUS) -> None:
        if objective not in ("f1", "em"):
            raise InvalidInputError("objective", f"must be 'f1' or 'em', got {objective!r}",
                                    "pass --objective f1 or --objective em")
        if not lambdas or not taus:
            raise InvalidInputError("grid", "is empty", "pass at least one lambda and tau")
        self.objective: Objective = objective
        self.lambdas = [float(v) for v in lambdas]
        self.taus = [float(v) for v in taus]
        self.scored = [s for items in scored_by_dataset.values() for s in items]
        if not self.scored:
            raise InvalidInputError("run_dir", "holds no question", "evaluate some questions")
        self.dataset_names = list(scored_by_dataset)
        self.dataset = np.array([k for k, items in enumerate(scored_by_dataset.values())
                                 for _ in items])
        if objective == "f1":
            self.direct = np.array([s.f1_direct for s in self.scored])
            self.rag_score = np.array([s.f1_rag for s in self.scored])
        else:
            self.direct = np.array([s.em_direct for s in self.scored])
            self.rag_score = np.array([s.em_rag for s in self.scored])
        self.rag = np.empty((len(self.scored), len(self.lambdas), len(self.taus)), dtype=bool)
        for q, s in enumerate(self.scored):
            self.rag[q] = [[s.decision.replay(lam, tau) == "rag" for tau in self.taus]
                           for lam in self.lambdas]

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
        default = self.score([self.scored[q].decision.replay(DEFAULT_LAMBDA, DEFAULT_TAU)
                              for q in idx], idx)
        return Fit(lam, tau, 100 * float(raw[i, j]), 100 * default)

    def chosen_scores(self, index: Sequence[int], lambda_bind: float, tau: float
                      ) -> list[float]:
        """Per-question score (0..1) of ``Decision.replay(lambda_bind, tau)`` on ``index``."""
        return [float(self.rag_score[q] if self.scored[q].decision.replay(lambda_bind, tau)
                      == "rag" else self.direct[q]) for q in index]


def assign_folds(datasets: Sequence[str], folds: int, seed: int) -> list[int]:
    """Fold of every question: each dataset shuffled (seeded) and dealt round-robin.

    The deal continues across datasets, so with at least ``folds`` questions no fold is
    empty, and every dataset is spread evenly over the folds (stratified).
    """
    if folds < 2:
        raise InvalidInputError("--folds", f"must be >= 2, got {folds}", "use 5 (the default)")
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
        """The JSON-ready summary stored in the calibration file."""
        b = self.bootstrap
        return CrossValidationResult(
            folds=self.folds, seed=self.seed, objective=objective, resamples=b.resamples, n=b.n,
            methods={m: IntervalResult(mean=v.mean, low=v.low, high=v.high)
                     for m, v in b.methods.items()},
            differences={k: DifferenceResult(mean=v.mean, low=v.low, high=v.high, versus=v.b,
                                             p_positive=v.p_positive)
                         for k, v in b.differences.items()},
            fold_fits=[FoldResult(lambda_bind=f.fit.lambda_bind, tau=f.fit.tau,
                                  n_train=len(f.train), n_test=len(f.test))
                       for f in self.fold_fits],
            small_sample=b.small_sample)


CV_COMPARISONS = [("calibrated", "default"), ("calibrated", BEST_SINGLE),
                  ("calibrated", "direct"), ("calibrated", "rag")]


def cross_validate(problem: Problem, folds: int = 5, seed: int = 0,
                   resamples: int = DEFAULT_RESAMPLES) -> CrossValidation:
    """k-fold cross-validation of the calibration (see the module docstring)."""
    names = [problem.dataset_names[d] for d in problem.dataset]
    assignment = assign_folds(names, folds, seed)
    held: dict[str, list[float]] = {m: [0.0] * len(problem) for m in CV_METHODS}
    fold_fits = []
    for k in range(folds):
        test = [q for q, f in enumerate(assignment) if f == k]
        train = [q for q, f in enumerate(assignment) if f != k]
        fit = problem.fit(train)
        fold_fits.append(FoldFit(k, tuple(train), tuple(test), fit))
        columns = {"calibrated": problem.chosen_scores(test, fit.lambda_bind, fit.tau),
                   "default": problem.chosen_scores(test, DEFAULT_LAMBDA, DEFAULT_TAU),
                   "direct": [float(problem.direct[q]) for q in test],
                   "rag": [float(problem.rag_score[q]) for q in test]}
        for method, values in columns.items():
            for q, value in zip(test, values, strict=True):
                held[method][q] = value
    groups = {name: {m: [held[m][q] for q in range(len(problem)) if names[q] == name]
                     for m in CV_METHODS} for name in problem.dataset_names
              if name in names}
    boot = grouped_bootstrap(groups, CV_COMPARISONS, resamples=resamples, seed=seed)
    return CrossValidation(folds, seed, fold_fits, held, boot)


def calibrate_run(
    run_dir: str | Path,
    *,
    objective: Objective = "f1",
    folds: int = 5,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    lambdas: Sequence[float] = LAMBDAS,
    taus: Sequence[float] = TAUS,
) -> tuple[Calibration, CrossValidation | None]:
    """Fit lambda_bind and tau on a run directory's cache (cross-validated when folds >= 2).

    Args:
        run_dir: a directory written by ``trustmargin eval``.
        objective: ``f1`` or ``em``, the mean maximized.
        folds: cross-validation folds (0 skips cross-validation).
        seed: seed of the fold shuffle and of the bootstrap.
        resamples: bootstrap resamples of the held-out comparison.
    """
    from trustmargin_integrations import __version__
    from trustmargin_integrations.evaluation.diagnostics import score_records
    from trustmargin_integrations.evaluation.rundir import load_run

    runs = load_run(run_dir)
    scored = {r.name: score_records(r.records) for r in runs}
    problem = Problem(scored, objective, lambdas, taus)
    cv = cross_validate(problem, folds, seed, resamples) if folds else None
    final = problem.fit()
    decisions = [rec.decision for r in runs for rec in r.records]
    info = [r.info for r in runs]
    modes = sorted({str(i["retrieval"]) for i in info if i.get("retrieval")})
    top_ks = {int(i["top_k"]) for i in info if i.get("top_k") is not None}
    calibration = Calibration(
        model_id=_only({d.model_id for d in decisions}, "model"),
        dtype=_maybe_only({str(i["dtype"]) for i in info if i.get("dtype")}),
        prompt_version=_only({d.prompt_version for d in decisions}, "prompt version"),
        retrieval=RetrievalSetup(mode=", ".join(modes) or None,
                                 top_k=top_ks.pop() if len(top_ks) == 1 else None),
        lambda_bind=final.lambda_bind, tau=final.tau, objective=objective,
        score=final.score, default_score=final.default_score,
        grid={"lambdas": problem.lambdas, "taus": problem.taus},
        fitted_on=FittedOn(run_dir=Path(run_dir).resolve().name,
                           datasets={r.name: len(r.records) for r in runs}, n=len(problem)),
        cv=cv.result(objective) if cv else None,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        package_version=__version__,
    )
    return calibration, cv


def _only(values: set[str], what: str) -> str:
    if len(values) != 1:
        raise InvalidInputError("run_dir", f"mixes {len(values)} values of the {what} "
                                f"({', '.join(sorted(values))})",
                                "calibrate on a run of one model and one prompt version")
    return next(iter(values))


def _maybe_only(values: set[str]) -> str | None:
    return next(iter(values)) if len(values) == 1 else (", ".join(sorted(values)) or None)


def describe(calibration: Calibration, cv: CrossValidation | None) -> list[str]:
    """Plain-text lines summarizing a calibration (what ``trustmargin calibrate`` prints)."""
    metric = calibration.objective.upper()
    lines = [f"model {calibration.model_id} ({calibration.dtype or 'dtype ?'}), prompts "
             f"{calibration.prompt_version}, retrieval {calibration.retrieval.mode} "
             f"top-{calibration.retrieval.top_k}",
             "questions: " + ", ".join(f"{k} {v}" for k, v in
                                        calibration.fitted_on.datasets.items())]
    if cv is not None:
        b = cv.bootstrap
        lines += ["", f"{cv.folds}-fold cross-validation (stratified by dataset, seed {cv.seed})"
                      f": held-out mean {metric} x100", ""]
        width = max(len(m) for m in b.methods)
        for m, v in b.methods.items():
            lines.append(f"  {m:<{width}}  {v.mean:6.2f}  {v.ci()}")
        lines.append("")
        for key, d in b.differences.items():
            label = key.replace(BEST_SINGLE, f"best single source ({d.b})")
            lines.append(f"  {label:<44} {d.mean:+6.2f}  {d.ci()}  P(> 0) = {d.p_positive:.2f}")
        fits = ", ".join(f"({f.fit.lambda_bind:g}, {f.fit.tau:g})" for f in cv.fold_fits)
        lines += ["", f"  per-fold fits (lambda, tau): {fits}", "  " + b.note()]
    lines += ["", f"final fit on all {calibration.fitted_on.n} questions: lambda_bind = "
                  f"{calibration.lambda_bind:g}, tau = {calibration.tau:g} ({metric} "
                  f"{calibration.score:.2f} in-sample; defaults 0.5 / -1.5: "
                  f"{calibration.default_score:.2f})"]
    if cv is None:
        lines.append("  in-sample numbers are optimistic; --folds 5 estimates the held-out gain")
    if calibration.lambda_bind == DEFAULT_LAMBDA and calibration.tau == DEFAULT_TAU:
        lines.append("  the defaults are already optimal on these questions")
    return lines

