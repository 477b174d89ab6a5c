"""A recorded question replayed under any policy, from its recorded margins (no model).

The records (``schema.Decision``) never import the rule: this module reads them through the
protocols below, so a cached run replays under a policy it was not decided by (the lambda x
tau grid, the ablations, a calibration file's or the domain check's policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from trustmargin_integrations.rule.policies import Policy
from trustmargin_integrations.rule.settled import SETTLED, settled_kept
from trustmargin_integrations.rule.verdict import MarginPair


class RecordedCandidate(Protocol):
    """One recorded RAG candidate's margins (None where it was not scored)."""

    @property
    def m_prior(self) -> float | None: ...

    @property
    def m_bind(self) -> float | None: ...


class RecordedDecision(RecordedCandidate, Protocol):
    """What replay reads of a recorded decision."""

    @property
    def id(self) -> str | None: ...

    @property
    def reason(self) -> str: ...

    @property
    def winner(self) -> int | None: ...

    @property
    def rag_candidates(self) -> Sequence[RecordedCandidate]: ...

    @property
    def policy(self) -> str: ...

    @property
    def lambda_bind(self) -> float: ...

    @property
    def tau(self) -> float: ...


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
