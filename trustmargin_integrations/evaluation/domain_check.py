"""The domain check: which policy to run on a domain, with the evidence, as a JSON-ready result.

:func:`check_policy` runs :func:`~.policy_selection.select_policy` on all labeled questions
(the final choice, and every candidate's cross-validated score with its interval) and estimates how
well that procedure does on questions it never saw by nested cross-validation: in each outer fold
the whole selection (its own inner folds, fits and decision) runs on the other folds only,
and its choice is scored on the held-out fold. :class:`PolicyCheckResult` is the record a
person reads (``verdict`` is one line) and the file the arbiter will load.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    SMALL_SAMPLE,
    Difference,
    Interval,
    grouped_bootstrap,
)
from trustmargin_integrations.evaluation.policy_selection import (
    DEFAULT_CRITERION,
    DEFAULT_FOLDS,
    POLICY_KINDS,
    SELECTION_RESAMPLES,
    Criterion,
    PolicyTable,
    Selection,
    select_policy,
)
from trustmargin_integrations.evaluation.rule_fit import Objective, assign_folds
from trustmargin_integrations.policy_file import OBJECTIVE_LABELS
from trustmargin_integrations.rule import Policy

ENOUGH_QUESTIONS = SMALL_SAMPLE
"""Labeled questions per dataset below which the check warns that its choice is unreliable
(the bootstrap's :data:`~.bootstrap.SMALL_SAMPLE`; why 100: docs/decisions.md)."""


class Estimate(BaseModel):
    """A mean (x100) with its 95% paired bootstrap interval."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, value: Interval | Difference) -> Estimate:
        """From a bootstrap interval."""
        return cls(mean=value.mean, low=value.low, high=value.high)


class PairedDifference(Estimate):
    """``a - b`` (x100) with its paired interval and the share of resamples above zero."""

    versus: str = Field(description="The policy subtracted.")
    p_positive: float

    @classmethod
    def of_difference(cls, value: Difference) -> PairedDifference:
        """From a bootstrap difference."""
        return cls(mean=value.mean, low=value.low, high=value.high, versus=value.b,
                   p_positive=value.p_positive)


COMPANION: dict[Objective, Objective] = {"f1": "em", "em": "f1", "contains": "f1"}
"""The metric reported beside each objective (the one the choice did not maximize): EM beside
F1 and F1 beside EM, as the paper reports both; F1 beside ``contains``, since exact match of a
whole chat answer is about 0 and says nothing."""


class CandidateScore(BaseModel):
    """One candidate: its numbers fitted on all labeled questions, and its cross-validated
    scores (x100, each question scored by a fit that did not see it) under the objective and
    its :data:`COMPANION`: F1 always, EM beside F1 or EM, ``contains`` (a gold answer stated in
    the text) when it is the objective."""

    model_config = ConfigDict(extra="forbid")

    policy: Policy
    f1: Estimate
    em: Estimate | None = None
    contains: Estimate | None = Field(
        None, description="Share of answers stating a gold answer (x100); None unless the "
                          "objective is contains.")

    def score(self, metric: Objective) -> Estimate | None:
        """The estimate under ``metric`` (None: not reported for this objective)."""
        return {"f1": self.f1, "em": self.em, "contains": self.contains}[metric]


class OuterFold(BaseModel):
    """One outer fold of the nested estimate: the policy chosen without its questions."""

    model_config = ConfigDict(extra="forbid")

    n_train: int
    n_test: int
    chosen: Policy


class NestedEstimate(BaseModel):
    """The check itself (choice included) scored on questions its choice never saw."""

    model_config = ConfigDict(extra="forbid")

    score: Estimate
    versus_fallback: PairedDifference
    versus_paper: PairedDifference
    folds: list[OuterFold]


class PolicyCheckResult(BaseModel):
    """What the domain check decided and why (JSON: ``model_dump_json``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    objective: Objective
    criterion: Criterion
    confidence: float
    folds: int
    seed: int
    resamples: int
    n: int
    sizes: dict[str, int] = Field(description="Dataset name -> labeled questions.")
    chosen: Policy
    keeps_trustmargin: bool = Field(description="True when a margin rule was chosen.")
    best_rule: Policy
    fallback: Policy = Field(description="The single source kept when no rule is: always-RAG "
                                         "unless always-Direct is significantly better.")
    candidates: dict[str, CandidateScore]
    rule_vs_fallback: PairedDifference = Field(
        description="Cross-validated best rule - fallback: the decision's evidence.")
    nested: NestedEstimate
    enough_questions: int
    small_sample: bool
    verdict: str


def require_questions(n: int, folds: int, where: str = "questions") -> None:
    """Refuse fewer questions than ``folds``-fold nested cross-validation needs (checked by
    ``trustmargin check`` before anything is generated, and here)."""
    if n < 2 * folds:
        # The outer training part must still deal every inner fold a question.
        raise InvalidInputError(where, f"{n} distinct labeled questions are too few for "
                                f"{folds}-fold nested cross-validation (it needs "
                                f"{2 * folds})", f"label at least {ENOUGH_QUESTIONS} questions"
                                + (f", or pass --folds {n // 2} (folds={n // 2} in Python) "
                                   "for a first look" if n >= 4 else ""))


def check_policy(table: PolicyTable, index: Sequence[int] | None = None, *,
                 folds: int = DEFAULT_FOLDS, seed: int = 0,
                 criterion: Criterion = DEFAULT_CRITERION,
                 resamples: int = DEFAULT_RESAMPLES,
                 selection_resamples: int = SELECTION_RESAMPLES) -> PolicyCheckResult:
    """Choose the policy on the labeled questions ``index`` (default: all) and estimate it.

    Args:
        table: the labeled questions.
        index: which of them to use; no other question is fitted on or scored.
        folds: folds of both cross-validation levels.
        seed: seed of the folds and the bootstraps.
        criterion: when the best rule is kept (see :mod:`.policy_selection`).
        resamples: bootstrap resamples of the reported intervals (and the final decision).
        selection_resamples: resamples behind each outer fold's decision.
    """
    pool = list(range(len(table))) if index is None else [int(q) for q in index]
    require_questions(len(pool), folds)
    final = select_policy(table, pool, folds=folds, seed=seed, resamples=resamples)
    nested = _nested_estimate(table, pool, final, folds=folds, seed=seed, criterion=criterion,
                              resamples=resamples, selection_resamples=selection_resamples)
    names = table.dataset_names
    sizes = {name: sum(names[q] == name for q in pool) for name in dict.fromkeys(names)
             if any(names[q] == name for q in pool)}
    other = COMPANION[table.objective]
    by_metric = {table.objective: final.bootstrap,
                 other: grouped_bootstrap(_groups(table, final, pool, other),
                                          resamples=resamples, seed=seed)}
    candidates = {kind: CandidateScore(policy=final.policies[kind],
                                       **{metric: Estimate.of(boot.methods[kind])
                                          for metric, boot in by_metric.items()})
                  for kind in POLICY_KINDS}
    small = min(sizes.values()) < ENOUGH_QUESTIONS
    chosen = final.chosen(criterion)
    return PolicyCheckResult(
        objective=table.objective, criterion=criterion, confidence=DEFAULT_CONFIDENCE,
        folds=folds, seed=seed, resamples=resamples, n=len(pool), sizes=sizes, chosen=chosen,
        keeps_trustmargin=chosen.uses_margins,
        best_rule=final.policies[final.best_rule],
        fallback=final.policies[final.fallback], candidates=candidates,
        rule_vs_fallback=PairedDifference.of_difference(final.difference), nested=nested,
        enough_questions=ENOUGH_QUESTIONS, small_sample=small,
        verdict=verdict_line(final, criterion, len(pool), table.objective, small))


def _groups(table: PolicyTable, selection: Selection, pool: Sequence[int], metric: Objective
            ) -> dict[str, dict[str, list[float]]]:
    """Dataset -> candidate -> held-out scores under ``metric`` (the bootstrap's input)."""
    groups: dict[str, dict[str, list[float]]] = {}
    for kind in POLICY_KINDS:
        values = table.values(selection.held_out[kind], pool, metric)
        for name, per in table.by_dataset(values, pool).items():
            groups.setdefault(name, {})[kind] = per
    return groups


def _nested_estimate(table: PolicyTable, pool: Sequence[int], final: Selection, *,
                     folds: int, seed: int, criterion: Criterion, resamples: int,
                     selection_resamples: int) -> NestedEstimate:
    """Outer folds: select on the other folds, score the choice on this one."""
    names = table.dataset_names
    assignment = assign_folds([names[q] for q in pool], folds, seed)
    check = np.zeros(len(pool), dtype=bool)
    outer = []
    for k in range(folds):
        test = [i for i, f in enumerate(assignment) if f == k]
        train = [pool[i] for i, f in enumerate(assignment) if f != k]
        chosen = select_policy(table, train, folds=folds, seed=seed,
                               resamples=selection_resamples).chosen(criterion)
        check[test] = table.chooses_rag(chosen, [pool[i] for i in test])
        outer.append(OuterFold(n_train=len(train), n_test=len(test), chosen=chosen))
    methods = {"check": check, "paper": table.chooses_rag(Policy.paper(), pool),
               final.fallback: table.chooses_rag(final.policies[final.fallback], pool)}
    groups: dict[str, dict[str, list[float]]] = {}
    for method, rag in methods.items():
        for name, per in table.by_dataset(table.values(rag, pool), pool).items():
            groups.setdefault(name, {})[method] = per
    boot = grouped_bootstrap(groups, [("check", final.fallback), ("check", "paper")],
                             resamples=resamples, seed=seed)
    return NestedEstimate(
        score=Estimate.of(boot.methods["check"]),
        versus_fallback=PairedDifference.of_difference(
            boot.differences[f"check - {final.fallback}"]),
        versus_paper=PairedDifference.of_difference(boot.differences["check - paper"]),
        folds=outer)


def verdict_line(selection: Selection, criterion: Criterion, n: int, objective: Objective,
                 small_sample: bool) -> str:
    """One line a person can act on: what to run, and the numbers behind it."""
    rule = selection.policies[selection.best_rule]
    single = selection.policies[selection.fallback]
    d = selection.difference
    metric = OBJECTIVE_LABELS[objective]
    evidence = (f"{d.mean:+.1f} {metric} [{d.low:+.1f}, {d.high:+.1f}] vs {single.label} "
                f"(cross-validated)")
    if selection.keeps_rule(criterion):
        line = f"Keep {rule.label}: on your {n} questions it scores {evidence}."
    else:
        source = "RAG" if single.kind == "always_rag" else "Direct"
        why = ("a significant loss" if d.high < 0 else
               "not a significant gain" if d.low <= 0 else "below the criterion")
        line = (f"Use {source}: on your {n} questions {rule.label}, the best margin rule, "
                f"scores {evidence}: {why}.")
    if small_sample:
        line += (f" Small sample: fewer than {ENOUGH_QUESTIONS} labeled questions per dataset "
                 "make this choice unreliable; label more.")
    return line

