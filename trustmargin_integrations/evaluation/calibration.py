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

With ``holdout`` > 0 a seeded, dataset-stratified share of the questions is set aside first:
the fit (and its cross-validation) sees only the rest, the file lists the ids it was fitted
on, and the held-out questions measure the fitted rule against the defaults, Direct and RAG.
That is how the calibrations shipped for named models (``calibration="shipped"``) were made,
so that an evaluation can be reported on questions the fit never saw.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
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
from trustmargin_integrations.margins import SETTLED, combined_margin, overrides

Objective = Literal["f1", "em"]

LAMBDAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(21))
"""lambda_bind grid: 0, 0.1, ..., 2.0."""
TAUS: tuple[float, ...] = tuple(round(-5.0 + 0.05 * i, 2) for i in range(161))
"""tau grid: -5, -4.95, ..., 3."""
CV_METHODS = ("calibrated", "default", "direct", "rag")
SHIPPED = "shipped"
"""``calibration="shipped"``: the file this package ships for a named model."""
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


class ComparisonResult(BaseModel):
    """The calibrated rule against the default rule and the single sources, on questions
    the fit did not see, with paired bootstrap intervals."""

    model_config = ConfigDict(extra="forbid")

    seed: int
    objective: Objective
    resamples: int
    n: int
    sizes: dict[str, int] = Field(default_factory=dict,
                                  description="Dataset name -> questions compared.")
    methods: dict[str, IntervalResult] = Field(
        description="calibrated (held-out), default (0.5, -1.5), direct, rag: x100.")
    differences: dict[str, DifferenceResult]
    small_sample: bool


class CrossValidationResult(ComparisonResult):
    """k-fold estimate of the calibrated rule against the default rule and single sources."""

    folds: int
    fold_fits: list[FoldResult]


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
    question_ids: list[str] = Field(
        default_factory=list,
        description="Ids of the questions fitted on (set when part of the run was held out).")
    holdout: float = Field(0.0, description="Share of the run's questions set aside.")
    split_seed: int | None = None


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
    held_out: ComparisonResult | None = Field(
        None, description="The fitted rule on the run's questions outside the fit.")
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
    def coerce(cls, value: str | Path | Calibration, *, model: str | None = None
               ) -> Calibration:
        """A Calibration, the one stored at a path, or (``"shipped"``) the one this package
        ships for the named ``model``."""
        if isinstance(value, Calibration):
            return value
        if str(value) == SHIPPED:
            return cls.load(shipped_path(model))
        return cls.load(value)

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


def shipped_models() -> list[str]:
    """Named models with a calibration file in this package."""
    folder = files("trustmargin_integrations").joinpath("calibrations")
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir()
                  if p.name.endswith(".json"))


def shipped_path(model: str | None) -> Path:
    """The calibration file shipped for ``model`` (a named model such as qwen2.5-1.5b)."""
    available = shipped_models()
    if model not in available:
        raise InvalidInputError(
            "calibration", f"no calibration is shipped for model {model!r} (shipped: "
            f"{', '.join(available) or 'none'})",
            "use one of those models, or fit your own: `trustmargin eval --model ...` then "
            "`trustmargin calibrate RUN_DIR`")
    return Path(str(files("trustmargin_integrations").joinpath(f"calibrations/{model}.json")))


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

    ``rag[q, i, j]`` is True when ``Decision.replay(lambdas[i], taus[j])`` would keep question
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
        if any(len(s.decision.rag_candidates) > 1 for s in self.scored):
            # A candidate's score is fixed per question here; with several RAG candidates
            # the kept one changes with lambda and tau, which this table cannot express.
            raise InvalidInputError("run_dir", "holds multi-candidate decisions",
                                    "calibrate on a pairwise run (trustmargin eval)")
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
        lams = np.asarray(self.lambdas)[:, None]
        taus = np.asarray(self.taus)[None, :]
        for q, s in enumerate(self.scored):
            d = s.decision
            if d.reason in SETTLED or d.m_prior is None or d.m_bind is None:
                # No lambda or tau changes a settled decision (replay raises on a scored
                # decision without margins, as it should).
                self.rag[q] = d.replay() == "rag"
            else:
                # The rule of margins.py on the whole grid at once (what Decision.replay
                # computes cell by cell; test_calibration checks they agree).
                self.rag[q] = overrides(combined_margin(d.m_prior, d.m_bind, lams), taus)

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


def split_holdout(datasets: Sequence[str], holdout: float, seed: int) -> list[bool]:
    """Which questions the fit may use (True) and which are held out (False).

    Each dataset is shuffled (seeded) on its own and ``round(holdout * n)`` of its questions
    are held out, so both parts keep the run's mix of datasets.
    """
    if not 0 <= holdout < 1:
        raise InvalidInputError("--holdout", f"must be in [0, 1), got {holdout}",
                                "use 0.5 to fit on half and report on the other half")
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


def calibrate_run(
    run_dir: str | Path,
    *,
    objective: Objective = "f1",
    folds: int = 5,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    lambdas: Sequence[float] = LAMBDAS,
    taus: Sequence[float] = TAUS,
    holdout: float = 0.0,
    split_seed: int = 0,
) -> tuple[Calibration, CrossValidation | None]:
    """Fit lambda_bind and tau on a run directory's cache (cross-validated when folds >= 2).

    Args:
        run_dir: a directory written by ``trustmargin eval``.
        objective: ``f1`` or ``em``, the mean maximized.
        folds: cross-validation folds (0 skips cross-validation).
        seed: seed of the fold shuffle and of the bootstrap.
        resamples: bootstrap resamples of the held-out comparison.
        holdout: share of each dataset's questions set aside before anything is fitted
            (cross-validation included); the file records the fitted ids and the fitted
            rule's scores on the held-out questions.
        split_seed: seed of the hold-out split.
    """
    from trustmargin_integrations._version import __version__
    from trustmargin_integrations.evaluation.diagnostics import score_records
    from trustmargin_integrations.evaluation.rundir import load_run

    runs = load_run(run_dir)
    scored = {r.name: score_records(r.records) for r in runs}
    problem = Problem(scored, objective, lambdas, taus)
    names = [problem.dataset_names[d] for d in problem.dataset]
    keep = split_holdout(names, holdout, split_seed)
    fit_on = [q for q in range(len(problem)) if keep[q]]
    held = [q for q in range(len(problem)) if not keep[q]]
    cv = cross_validate(problem, folds, seed, resamples, fit_on) if folds else None
    final = problem.fit(fit_on)
    decisions = [rec.decision for r in runs for rec in r.records]
    ids = [str(s.decision.id) for s in problem.scored]
    if holdout and len(set(ids)) != len(ids):
        raise InvalidInputError("run_dir", "holds questions without unique ids, so the "
                                "held-out questions cannot be named",
                                "evaluate with `trustmargin eval` (it sets dataset:test_id ids)")
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
        fitted_on=FittedOn(
            run_dir=Path(run_dir).resolve().name,
            datasets={n: sum(names[q] == n for q in fit_on) for n in dict.fromkeys(names)},
            n=len(fit_on), question_ids=[ids[q] for q in fit_on] if held else [],
            holdout=holdout, split_seed=split_seed if held else None),
        cv=cv.result(objective) if cv else None,
        held_out=comparison_result(held_out_comparison(problem, held, final, resamples, seed),
                                   objective) if held else None,
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
    fitted = calibration.fitted_on
    lines = [f"model {calibration.model_id} ({calibration.dtype or 'dtype ?'}), prompts "
             f"{calibration.prompt_version}, retrieval {calibration.retrieval.mode} "
             f"top-{calibration.retrieval.top_k}",
             "fitted on: " + ", ".join(f"{k} {v}" for k, v in fitted.datasets.items())]
    if cv is not None:
        lines += ["", f"{cv.folds}-fold cross-validation on those questions (stratified by "
                      f"dataset, seed {cv.seed}): held-out mean {metric} x100", ""]
        lines += _comparison_lines(cv.result(calibration.objective))
        fits = ", ".join(f"({f.fit.lambda_bind:g}, {f.fit.tau:g})" for f in cv.fold_fits)
        lines += ["", f"  per-fold fits (lambda, tau): {fits}", "  " + cv.bootstrap.note()]
    scope = "all" if not fitted.holdout else "the"
    lines += ["", f"final fit on {scope} {fitted.n} questions: lambda_bind = "
                  f"{calibration.lambda_bind:g}, tau = {calibration.tau:g} ({metric} "
                  f"{calibration.score:.2f} in-sample; defaults 0.5 / -1.5: "
                  f"{calibration.default_score:.2f})"]
    if cv is None and calibration.held_out is None:
        lines.append("  in-sample numbers are optimistic; --folds 5 estimates the held-out gain")
    if calibration.lambda_bind == DEFAULT_LAMBDA and calibration.tau == DEFAULT_TAU:
        lines.append("  the defaults are already optimal on these questions")
    if calibration.held_out is not None:
        held = calibration.held_out
        lines += ["", f"held out before fitting ({100 * fitted.holdout:g}% of each dataset, "
                      f"split seed {fitted.split_seed}): the final fit on "
                      + ", ".join(f"{k} {v}" for k, v in held.sizes.items())
                      + f" questions it never saw, mean {metric} x100", ""]
        lines += _comparison_lines(held)
        if held.small_sample:
            lines.append("  small sample: the intervals are wide and only approximate")
    return lines


def _comparison_lines(result: ComparisonResult) -> list[str]:
    """Each method's mean and interval, then each difference with its interval."""
    width = max(len(m) for m in result.methods)
    lines = [f"  {m:<{width}}  {v.mean:6.2f}  [{v.low:.2f}, {v.high:.2f}]"
             for m, v in result.methods.items()]
    lines.append("")
    for key, d in result.differences.items():
        label = key.replace(BEST_SINGLE, f"best single source ({d.versus})")
        lines.append(f"  {label:<44} {d.mean:+6.2f}  [{d.low:+.2f}, {d.high:+.2f}]  "
                     f"P(> 0) = {d.p_positive:.2f}")
    return lines
