"""A recorded question replayed under any policy, from its recorded margins (no model).

The records (``schema.Decision``) never import the rule: this module reads them through the
protocols below, so a cached run replays under a policy it was not decided by (the lambda x
tau grid, the ablations, a calibration file's or the domain check's policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from trustmargin_integrations.rule.policies import Policy
from trustmargin_integrations.rule.settled import SETTLED, settle_among, settled_kept
from trustmargin_integrations.rule.verdict import MarginPair

Variant = Literal["full", "no_prior", "no_bind"]
"""The paper's rule or one of its ablations (w/o M_prior, w/o M_bind): old names of the
policies ``rule``, ``weighted_bind`` and ``prior_only`` (``Decision.replay``'s argument)."""
VARIANTS: tuple[Variant, ...] = ("full", "no_prior", "no_bind")


def variant_policy(lambda_bind: float, tau: float, variant: Variant = "full") -> Policy:
    """The policy an ablation variant names, at ``lambda_bind`` and ``tau``.

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use 'full', 'no_prior' or 'no_bind'")
    return Policy.of(variant, lambda_bind, tau, drop_unused=True)


class RecordedCandidate(Protocol):
    """One recorded RAG candidate's margins (None where it was not scored)."""

    @property
    def m_prior(self) -> float | None: ...

    @property
    def m_bind(self) -> float | None: ...


class PairwiseRecord(RecordedCandidate, Protocol):
    """What :func:`multi_candidate_answer` reads of a pairwise decision (and replay of any)."""

    @property
    def reason(self) -> str: ...

    @property
    def lambda_bind(self) -> float: ...

    @property
    def tau(self) -> float: ...

    @property
    def direct_answer(self) -> str: ...

    @property
    def rag_answer(self) -> str: ...


class RecordedDecision(PairwiseRecord, Protocol):
    """What replay reads of a recorded decision."""

    @property
    def id(self) -> str | None: ...

    @property
    def winner(self) -> int | None: ...

    @property
    def rag_candidates(self) -> Sequence[RecordedCandidate]: ...

    @property
    def policy(self) -> str: ...


def own_policy(decision: RecordedDecision) -> Policy:
    """The policy that made the recorded decision, with its numbers."""
    return Policy.from_setting(decision.policy, decision.lambda_bind, decision.tau)


def recorded_margins(decision: RecordedDecision) -> list[MarginPair | None] | None:
    """Each RAG candidate's recorded margins (one for a pairwise decision; None for one that
    cannot win); None for a decision settled before any scoring.

    Raises:
        ValueError: a scored decision without margins (a damaged record).
    """
    if decision.reason in SETTLED:
        return None
    rows = decision.rag_candidates or [decision]
    margins = [None if c.m_prior is None or c.m_bind is None else MarginPair(c.m_prior, c.m_bind)
               for c in rows]
    if all(pair is None for pair in margins):
        raise ValueError(f"decision {decision.id!r} has reason {decision.reason!r} but no "
                         "margins")
    return margins


def replay_winner(decision: RecordedDecision, policy: Policy | None = None) -> int | None:
    """Which RAG candidate ``policy`` (default: the decision's own) keeps: its index in
    ``rag_candidates`` (0 for the one RAG answer of a pairwise decision), None for Direct.

    A decision settled before scoring keeps its outcome under every policy, as the arbiter
    keeps it (its RAG answer is blank or absent, or equals Direct).
    """
    margins = recorded_margins(decision)
    if margins is None:
        return settled_kept(decision.reason,
                            decision.winner if decision.rag_candidates else 0)
    return (policy or own_policy(decision)).decide(margins).kept


def multi_candidate_answer(decisions: Sequence[PairwiseRecord]) -> str:
    """The answer TrustMargin keeps among Direct and several RAG candidates, given one
    pairwise decision per candidate (same question, Direct answer and passages).

    Each candidate's likelihoods do not depend on the other candidates, so its pairwise
    margins are the ones multi-candidate arbitration computes; the choice is made by the one
    rule (:func:`~.settled.settle_among`, then the paper's rule at the first decision's
    numbers).
    """
    first = decisions[0]
    blank = [d.reason in ("rag_answer_blank", "both_answers_blank") for d in decisions]
    agree = [d.reason == "answers_agree" for d in decisions]
    direct_blank = any(d.reason in ("direct_answer_blank", "both_answers_blank")
                       for d in decisions)
    verdict = settle_among(has_evidence=all(d.reason != "no_evidence" for d in decisions),
                           direct_blank=direct_blank, rag_blank=blank, agree_unscored=agree)
    if verdict is None:
        margins = [MarginPair(d.m_prior, d.m_bind)
                   if d.m_prior is not None and d.m_bind is not None
                   else MarginPair(0.0, 0.0) if a else None
                   for d, a in zip(decisions, agree, strict=True)]
        verdict = Policy.fitted(first.lambda_bind, first.tau).decide(margins)
    if verdict.choice == "direct" or verdict.candidate is None:
        return first.direct_answer
    return decisions[verdict.candidate].rag_answer
