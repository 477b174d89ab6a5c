"""How many labeled questions the domain check needs: learning curves by subsampling.

For each seed a sample of ``size`` labeled questions is drawn,
:func:`~.policy_selection.select_policy` chooses on it and the choice is scored on the rest of
the dataset (x100): ``chosen``, ``regret`` (hindsight best of the six fitted candidates minus
the choice), ``worse_than_single`` / ``versus_single``, ``worse_than_rag``, and the paper's
rule, always-RAG, always-Direct and the hindsight best for reference. Array replay of cached
decisions: hundreds of seeds take seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trustmargin_integrations.evaluation.policy_selection import (
    CRITERIA,
    DEFAULT_FOLDS,
    SELECTION_RESAMPLES,
    Criterion,
    PolicyKind,
    PolicyTable,
    select_policy,
)

SIZES: tuple[int, ...] = (25, 50, 100, 200)
DEFAULT_SEEDS = 200
_EPS = 1e-9  # score differences (0..1) below this are ties, not losses


@dataclass(frozen=True)
class CurveSample:
    """One seed: the labeled sample, the rest, and every policy's score on the rest (x100)."""

    dataset: str
    size: int
    seed: int
    sample: tuple[int, ...]
    rest: tuple[int, ...]
    chosen: dict[Criterion, PolicyKind]
    rest_scores: dict[PolicyKind, float]

    @property
    def hindsight(self) -> float:
        """The best candidate's score on the rest."""
        return max(self.rest_scores.values())

    @property
    def best_single(self) -> float:
        """The better single source's score on the rest."""
        return max(self.rest_scores["always_rag"], self.rest_scores["always_direct"])

    def score(self, criterion: Criterion) -> float:
        """The chosen policy's score on the rest."""
        return self.rest_scores[self.chosen[criterion]]


@dataclass(frozen=True)
class CurveRow:
    """Summary over seeds of one dataset, sample size and criterion (scores x100)."""

    dataset: str
    size: int
    n_rest: int
    criterion: Criterion
    seeds: int
    chosen: float
    regret: float
    regret_sd: float
    regret_p90: float
    worse_than_single: float
    versus_single: float
    worse_than_rag: float
    kept_rule: float
    paper: float
    rag: float
    direct: float
    hindsight: float


def curve_samples(table: PolicyTable, dataset: str, sizes: Sequence[int] = SIZES,
                  seeds: int = DEFAULT_SEEDS, *, folds: int = DEFAULT_FOLDS,
                  resamples: int = SELECTION_RESAMPLES) -> list[CurveSample]:
    """Selection on ``size`` questions of ``dataset``, scored on its other questions, for
    every size smaller than the dataset and every seed."""
    members = np.array([q for q, name in enumerate(table.dataset_names) if name == dataset])
    out = []
    for size in sizes:
        if size >= members.size:
            continue
        for seed in range(seeds):
            order = np.random.default_rng([seed, size]).permutation(members)
            sample, rest = sorted(order[:size].tolist()), sorted(order[size:].tolist())
            selection = select_policy(table, sample, folds=folds, seed=seed,
                                      resamples=resamples)
            scores = {kind: 100 * table.score(policy, rest)
                      for kind, policy in selection.policies.items()}
            chosen = {c: selection.chosen_kind(c) for c in CRITERIA}
            out.append(CurveSample(dataset, size, seed, tuple(sample), tuple(rest), chosen,
                                   scores))
    return out


def curve_rows(samples: Sequence[CurveSample]) -> list[CurveRow]:
    """One row per dataset, size and criterion, in the samples' order."""
    keys = list(dict.fromkeys((s.dataset, s.size) for s in samples))
    rows = []
    for dataset, size in keys:
        group = [s for s in samples if (s.dataset, s.size) == (dataset, size)]
        for criterion in CRITERIA:
            chosen = np.array([s.score(criterion) for s in group])
            regret = np.array([s.hindsight for s in group]) - chosen
            versus = chosen - np.array([s.best_single for s in group])
            rows.append(CurveRow(
                dataset=dataset, size=size, n_rest=len(group[0].rest), criterion=criterion,
                seeds=len(group), chosen=float(chosen.mean()), regret=float(regret.mean()),
                regret_sd=float(regret.std()), regret_p90=float(np.percentile(regret, 90)),
                worse_than_single=float(np.mean(versus < -100 * _EPS)),
                versus_single=float(versus.mean()),
                worse_than_rag=float(np.mean(
                    chosen < np.array([s.rest_scores["always_rag"] for s in group]) - 100 * _EPS)),
                kept_rule=float(np.mean([s.chosen[criterion] not in ("always_rag",
                                                                      "always_direct")
                                         for s in group])),
                paper=_mean(group, "paper"), rag=_mean(group, "always_rag"),
                direct=_mean(group, "always_direct"),
                hindsight=float(np.mean([s.hindsight for s in group]))))
    return rows


def _mean(samples: Sequence[CurveSample], kind: PolicyKind) -> float:
    return float(np.mean([s.rest_scores[kind] for s in samples]))


def format_rows(rows: Sequence[CurveRow], metric: str = "F1") -> list[str]:
    """A markdown table of the rows."""
    lines = [f"| dataset | labeled | rest | criterion | chosen {metric} | regret (sd, p90) | "
             "worse than best single | chosen - best single | worse than RAG | rule kept | "
             "paper | RAG | Direct | hindsight |", "|" + "---|" * 14]
    for r in rows:
        lines.append(
            f"| {r.dataset} | {r.size} | {r.n_rest} | {r.criterion} | {r.chosen:.2f} | "
            f"{r.regret:.2f} ({r.regret_sd:.2f}, {r.regret_p90:.2f}) | "
            f"{100 * r.worse_than_single:.0f}% | {r.versus_single:+.2f} | "
            f"{100 * r.worse_than_rag:.0f}% | "
            f"{100 * r.kept_rule:.0f}% | {r.paper:.2f} | {r.rag:.2f} | {r.direct:.2f} | "
            f"{r.hindsight:.2f} |")
    return lines
