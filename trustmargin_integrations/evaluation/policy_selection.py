"""Choosing a decision policy from a domain's labeled questions (cached decisions, no model).

:func:`select_policy` cross-validates the six :data:`POLICY_KINDS` on the labeled questions,
takes the best margin rule ``R`` and the fallback ``S`` (plain RAG unless always-Direct beats
it significantly), and keeps ``R`` only when the paired-bootstrap lower bound of ``R - S`` is
above 0 (:data:`DEFAULT_CRITERION`). Why that criterion, with its measured failure rates:
docs/decisions.md, "Policy selection: the rule must beat the fallback significantly".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import Bootstrap, Difference, grouped_bootstrap
from trustmargin_integrations.evaluation.diagnostics import GradedDecision
from trustmargin_integrations.evaluation.rule_fit import (
    Objective,
    Problem,
    assign_folds,
    side_scores,
)
from trustmargin_integrations.policy_file import OBJECTIVES
from trustmargin_integrations.rule import PAPER_LAMBDA_BIND, PAPER_TAU, SETTLED, Policy
from trustmargin_integrations.rule.replay import replay

PolicyKind = Literal["paper", "fitted", "prior_only", "bind_only", "always_rag",
                     "always_direct"]
"""The domain check's candidates: the paper's rule (0.5, -1.5), the rule with fitted
lambda_bind and tau, one margin against a threshold (``M_bind > tau``, ``M_prior > tau``), one
source always. Names of candidates, not of policies: ``paper`` and ``fitted`` are both the
policy ``rule``."""
RULE_KINDS: tuple[PolicyKind, ...] = ("paper", "fitted", "prior_only", "bind_only")
"""The candidates that apply a margin rule (simplest first: the order ties are broken in)."""
SINGLE_SOURCE_KINDS: tuple[PolicyKind, ...] = ("always_rag", "always_direct")
"""The candidates that ignore the margins (always-RAG first: a tie keeps plain RAG)."""
POLICY_KINDS: tuple[PolicyKind, ...] = RULE_KINDS + SINGLE_SOURCE_KINDS

Criterion = Literal["superior", "noninferior", "point"]
"""When the best rule is kept over the fallback single source (see the module docstring)."""
CRITERIA: tuple[Criterion, ...] = ("superior", "noninferior", "point")
DEFAULT_CRITERION: Criterion = "superior"
DEFAULT_FOLDS = 5
SELECTION_RESAMPLES = 2_000
"""Bootstrap resamples behind one selection (its decision needs one interval's bounds)."""
# Ties of tau fits go to the threshold the paper's ablation uses: 0.5 * M_bind > -1.5 is
# M_bind > -3; M_prior > -1.5.
_ONE_MARGIN_DEFAULT_TAU: dict[PolicyKind, float] = {
    "bind_only": PAPER_TAU / PAPER_LAMBDA_BIND, "prior_only": PAPER_TAU}
_TIE = 9  # objective values equal to 9 decimals (on 0..1) are ties, as in policy_file.py


class PolicyTable:
    """Labeled questions ready for replay: both candidates' scores under every objective
    (F1, EM, contains) and their margins.

    Built once per run; every fit and every selection on a subset reads it. The full rule's
    lambda x tau table is the calibration's :class:`Problem`; the one-margin rules get a
    question x tau table here, from the same :meth:`Policy.keeps_rag`.
    """

    def __init__(self, scored_by_dataset: Mapping[str, Sequence[GradedDecision]],
                 objective: Objective = "f1") -> None:
        self.problem = Problem(scored_by_dataset, objective)
        self.objective: Objective = objective
        scored = self.problem.scored
        self.scores: dict[Objective, tuple[np.ndarray, np.ndarray]] = {
            metric: side_scores(scored, metric) for metric in OBJECTIVES}
        decisions = [s.decision for s in scored]
        self.settled = np.array([d.reason in SETTLED for d in decisions])
        # A settled question keeps its outcome under every rule (replay's contract).
        self.settled_rag = np.array([d.reason in SETTLED and replay(d) == "rag"
                                     for d in decisions])
        for d, settled in zip(decisions, self.settled, strict=True):
            if not settled and (d.m_prior is None or d.m_bind is None):
                raise InvalidInputError("run_dir", f"decision {d.id!r} was scored but has no "
                                        "margins", "re-run `trustmargin eval` for it")
        self.m_prior = np.array([np.nan if s else d.m_prior
                                 for d, s in zip(decisions, self.settled, strict=True)], float)
        self.m_bind = np.array([np.nan if s else d.m_bind
                                for d, s in zip(decisions, self.settled, strict=True)], float)
        taus = np.asarray(self.problem.taus)
        self.one_margin = {kind: self._rule_table(kind, taus) for kind in _ONE_MARGIN_DEFAULT_TAU}

    def __len__(self) -> int:
        return len(self.problem)

    @property
    def dataset_names(self) -> list[str]:
        """Dataset of every question, in question order."""
        return [self.problem.dataset_names[d] for d in self.problem.dataset]

    def _rule_table(self, kind: PolicyKind, taus: np.ndarray) -> np.ndarray:
        """question x tau: does the one-margin rule keep RAG."""
        table = Policy.of(kind, tau=0.0).keeps_rag_over(self.m_prior, self.m_bind, taus)
        return np.where(self.settled[:, None], self.settled_rag[:, None], table)

    def chooses_rag(self, policy: Policy, index: Sequence[int]) -> np.ndarray:
        """Per question of ``index``: does ``policy`` keep the RAG answer (the vectorised
        :meth:`~trustmargin_integrations.rule.Policy.keeps_rag` on the cached margins; a
        single source decides settled questions too, as plain RAG or Direct would)."""
        idx = np.asarray(index, dtype=int)
        rag = policy.keeps_rag(self.m_prior[idx], self.m_bind[idx])
        if not policy.uses_margins:
            return rag
        return np.where(self.settled[idx], self.settled_rag[idx], rag)

    def values(self, rag: np.ndarray, index: Sequence[int], metric: Objective | None = None
               ) -> np.ndarray:
        """Per-question score (0..1) of the choices ``rag`` on ``index``."""
        direct, rag_score = self.scores[metric or self.objective]
        idx = np.asarray(index, dtype=int)
        return np.where(rag, rag_score[idx], direct[idx])

    def mean(self, values: np.ndarray, index: Sequence[int]) -> float:
        """Mean of the per-dataset means (0..1) of per-question ``values`` on ``index``."""
        groups = self.problem.dataset[np.asarray(index, dtype=int)]
        return float(np.mean([values[groups == d].mean() for d in np.unique(groups)]))

    def score(self, policy: Policy, index: Sequence[int], metric: Objective | None = None
              ) -> float:
        """The objective (0..1) of ``policy`` on ``index``."""
        return self.mean(self.values(self.chooses_rag(policy, index), index, metric), index)

    def by_dataset(self, values: np.ndarray, index: Sequence[int]) -> dict[str, list[float]]:
        """Per-question ``values`` on ``index`` split by dataset (the bootstrap's groups)."""
        names = self.dataset_names
        out: dict[str, list[float]] = {}
        for q, value in zip(index, values, strict=True):
            out.setdefault(names[int(q)], []).append(float(value))
        return out


def fit_candidates(table: PolicyTable, index: Sequence[int]) -> dict[PolicyKind, Policy]:
    """Every candidate policy with its numbers fitted on the questions ``index`` only."""
    idx = [int(q) for q in index]
    fit = table.problem.fit(idx)
    return {"paper": Policy.paper(), "fitted": Policy.fitted(fit.lambda_bind, fit.tau),
            "prior_only": Policy.prior_only(_fit_tau(table, "prior_only", idx)),
            "bind_only": Policy.bind_only(_fit_tau(table, "bind_only", idx)),
            "always_rag": Policy.always_rag(), "always_direct": Policy.always_direct()}


def _fit_tau(table: PolicyTable, kind: PolicyKind, index: Sequence[int]) -> float:
    """The tau that maximizes a one-margin rule's objective on ``index`` (ties: the paper's
    ablation threshold, then the smaller tau)."""
    idx = np.asarray(index, dtype=int)
    direct, rag = table.scores[table.objective]
    groups = table.problem.dataset[idx]
    means = []
    for d in np.unique(groups):
        sel = idx[groups == d]
        gain = (rag[sel] - direct[sel]) @ table.one_margin[kind][sel].astype(float)
        means.append((direct[sel].sum() + gain) / sel.size)
    grid = np.round(np.mean(means, axis=0), _TIE)
    taus = table.problem.taus
    best = [j for j in np.flatnonzero(grid == grid.max())]
    j = min(best, key=lambda j: (abs(taus[j] - _ONE_MARGIN_DEFAULT_TAU[kind]), j))
    return taus[j]


@dataclass(frozen=True)
class Selection:
    """One selection on the questions ``index`` (see the module docstring).

    ``held_out`` holds, per candidate, whether it kept RAG on each question of ``index`` when
    fitted on the other folds; ``bootstrap`` has every candidate's held-out objective and the
    differences ``always_direct - always_rag`` and ``best_rule - fallback`` (key
    :attr:`difference_key`). ``fallback`` is the single source kept when the rule is not.
    """

    index: tuple[int, ...]
    policies: dict[PolicyKind, Policy]
    held_out: dict[PolicyKind, np.ndarray]
    best_rule: PolicyKind
    fallback: PolicyKind
    bootstrap: Bootstrap

    @property
    def difference_key(self) -> str:
        """Key of ``best_rule - fallback`` in the bootstrap's differences."""
        return f"{self.best_rule} - {self.fallback}"

    @property
    def difference(self) -> Difference:
        """The cross-validated ``best_rule - fallback`` (x100) and its interval."""
        return self.bootstrap.differences[self.difference_key]

    def keeps_rule(self, criterion: Criterion = DEFAULT_CRITERION) -> bool:
        """Whether the best rule is kept under ``criterion``."""
        d = self.difference
        if criterion == "superior":
            return d.low > 0
        if criterion == "noninferior":
            return d.high >= 0
        if criterion == "point":
            return d.mean > 0
        raise InvalidInputError("criterion", f"unknown criterion {criterion!r}",
                                f"use one of {', '.join(CRITERIA)}")

    def chosen_kind(self, criterion: Criterion = DEFAULT_CRITERION) -> PolicyKind:
        """The chosen candidate's name."""
        return self.best_rule if self.keeps_rule(criterion) else self.fallback

    def chosen(self, criterion: Criterion = DEFAULT_CRITERION) -> Policy:
        """The chosen policy, its numbers fitted on all of ``index``."""
        return self.policies[self.chosen_kind(criterion)]


def select_policy(table: PolicyTable, index: Sequence[int], *, folds: int = DEFAULT_FOLDS,
                  seed: int = 0, resamples: int = SELECTION_RESAMPLES) -> Selection:
    """Cross-validate the six candidates on ``index`` and fit them on all of it.

    Only the questions ``index`` are fitted on or scored; the rest of the table is unseen.
    """
    pool = [int(q) for q in index]
    names = table.dataset_names
    assignment = assign_folds([names[q] for q in pool], folds, seed)
    held = {kind: np.zeros(len(pool), dtype=bool) for kind in POLICY_KINDS}
    for k in range(folds):
        test = [i for i, f in enumerate(assignment) if f == k]
        fitted = fit_candidates(table, [pool[i] for i, f in enumerate(assignment) if f != k])
        for kind, policy in fitted.items():
            held[kind][test] = table.chooses_rag(policy, [pool[i] for i in test])
    cv = {kind: table.mean(table.values(held[kind], pool), pool) for kind in POLICY_KINDS}
    # max() keeps the first of equal scores: the simpler rule, always-RAG before Direct.
    best_rule = max(RULE_KINDS, key=lambda kind: round(cv[kind], _TIE))
    groups: dict[str, dict[str, list[float]]] = {}
    for kind in POLICY_KINDS:
        for name, values in table.by_dataset(table.values(held[kind], pool), pool).items():
            groups.setdefault(name, {})[kind] = values
    # One bootstrap for every comparison the decision may need (the drawn questions do not
    # depend on the comparisons, so each interval is the one a bootstrap of it alone gives).
    rag, direct = SINGLE_SOURCE_KINDS
    boot = grouped_bootstrap(groups, [(direct, rag), (best_rule, rag), (best_rule, direct)],
                             resamples=resamples, seed=seed)
    fallback = direct if boot.differences[f"{direct} - {rag}"].low > 0 else rag
    return Selection(tuple(pool), fit_candidates(table, pool), held, best_rule, fallback,
                     boot)
