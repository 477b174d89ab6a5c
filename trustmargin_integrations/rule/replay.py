"""A recorded question replayed under any policy, from its recorded margins (no model).

The records (``schema.Decision``) never import the rule and carry no rule of their own: this
module reads them through the protocols below, so a cached run replays under a policy it was
not decided by (the lambda x tau grid, the ablations, a policy file's or the domain
check's policy):

* :func:`replay`: the side kept (``"direct"`` / ``"rag"``);
* :func:`replay_winner`: the kept RAG candidate's index (None: Direct);
* :func:`replay_answer`: the kept answer's text;
* :func:`kept_rag`: whether the decision as made kept the RAG side.

Each takes a :class:`~.policies.Policy`, or the numbers of the margin rule (``lambda_bind``,
``tau``, the ablation ``variant``; the missing ones are the decision's own), or nothing: the
decision's own policy and numbers.

A decision made without scoring (its policy keeps one side whatever the margins, see
:meth:`~.policies.Policy.unscored`: reason ``policy_always_rag`` / ``policy_always_direct`` and
no margins) replays under a policy that keeps a side without margins to that side, when the
record holds that side's answer (its own policy always does). Under a margin policy, or for a
side never produced, it raises :class:`~trustmargin_integrations.errors.UnscoredDecisionError`:
there are no margins to decide on, and guessing a side would silently bias a fit or a check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from trustmargin_integrations.errors import InvalidInputError, UnscoredDecisionError
from trustmargin_integrations.rule.policies import Policy
from trustmargin_integrations.rule.settled import SETTLED, settle_among, settled_kept
from trustmargin_integrations.rule.verdict import MarginPair
from trustmargin_integrations.vocabulary import Choice, check_rule_value

Variant = Literal["full", "no_prior", "no_bind"]
"""The paper's rule or one of its ablations (w/o M_prior, w/o M_bind): old names of the
policies ``rule``, ``weighted_bind`` and ``prior_only`` (the ``variant`` of :func:`replay`)."""
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


class RecordedRagCandidate(RecordedCandidate, Protocol):
    """One recorded RAG candidate of a multi-candidate decision: its margins and its text."""

    @property
    def answer(self) -> str: ...


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
    def rag_candidates(self) -> Sequence[RecordedRagCandidate]: ...

    @property
    def candidates(self) -> Sequence[RecordedRagCandidate]:
        """Every RAG candidate, the one RAG answer of a pairwise decision included."""
        ...

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
    margins = [None if c.m_prior is None or c.m_bind is None else MarginPair(c.m_prior, c.m_bind)
               for c in decision.candidates]
    if all(pair is None for pair in margins):
        raise ValueError(f"decision {decision.id!r} has reason {decision.reason!r} but no "
                         "margins")
    return margins


def made_unscored(decision: RecordedDecision) -> bool:
    """True for a decision its policy made without any margin (no likelihood computed): its
    reason is the verdict :meth:`~.policies.Policy.unscored` gives and it records no margin.
    A single-source decision made from scored evidence (``score_batch`` then ``decide``)
    records its margins and is not one."""
    if decision.reason in SETTLED or any(c.m_prior is not None or c.m_bind is not None
                                         for c in decision.candidates):
        return False
    verdict = own_policy(decision).unscored(len(decision.candidates))
    return verdict is not None and decision.reason == verdict.reason


def _unscored_winner(decision: RecordedDecision, policy: Policy) -> int | None:
    """The kept RAG candidate (None: Direct) of a decision made without scoring, replayed
    under ``policy`` (see the module docstring).

    Raises:
        UnscoredDecisionError: ``policy`` needs margins, or the side it keeps was never
            produced for this question.
    """
    fix = ("re-arbitrate the question under that policy (arbitrate_batch(..., policy=...)), "
           "or score it with score_batch, which computes the margins, and decide from that")
    made_by = own_policy(decision).label
    verdict = policy.unscored(len(decision.candidates))
    if verdict is None:
        raise UnscoredDecisionError(
            "policy", f"decision {decision.id!r} was made by {made_by} without scoring (no "
            f"margins recorded), and {policy.label} decides on margins", fix)
    kept = verdict.kept
    text = decision.direct_answer if kept is None else decision.candidates[kept].answer
    if not text.strip():
        raise UnscoredDecisionError(
            "policy", f"decision {decision.id!r} was made by {made_by} without scoring, and "
            f"its {verdict.choice} answer, which {policy.label} keeps, was never produced",
            fix)
    return kept


def policy_at(decision: RecordedDecision, lambda_bind: float | None = None,
              tau: float | None = None, variant: Variant = "full") -> Policy:
    """The policy a replay applies: with no number and the ``"full"`` variant, the decision's
    own (:func:`own_policy`); otherwise the margin rule, or the ablation ``variant`` names, at
    ``lambda_bind`` and ``tau`` (each defaulting to the decision's own), whatever policy made
    the decision.

    Raises:
        InvalidInputError: ``lambda_bind`` or ``tau`` is not a finite number within the
            config's bounds (NaN would silently replay as Direct).
        ValueError: an unknown variant.
    """
    if lambda_bind is None and tau is None and variant == "full":
        return own_policy(decision)
    lam = decision.lambda_bind if lambda_bind is None else check_rule_value(
        "lambda_bind", lambda_bind)
    threshold = decision.tau if tau is None else check_rule_value("tau", tau)
    return variant_policy(lam, threshold, variant)


def _policy(decision: RecordedDecision, policy: Policy | None, lambda_bind: float | None,
            tau: float | None, variant: Variant) -> Policy:
    """``policy``, or the one :func:`policy_at` names; both given is refused."""
    if policy is None:
        return policy_at(decision, lambda_bind, tau, variant)
    if lambda_bind is not None or tau is not None or variant != "full":
        raise InvalidInputError("policy", "a policy and the rule's numbers were both given",
                                "pass the policy alone (its numbers are its own), or only "
                                "lambda_bind / tau / variant")
    return policy


def replay_winner(decision: RecordedDecision, policy: Policy | None = None, *,
                  lambda_bind: float | None = None, tau: float | None = None,
                  variant: Variant = "full") -> int | None:
    """Which RAG candidate is kept: its index in ``rag_candidates`` (0 for the one RAG
    answer of a pairwise decision), None for Direct; under ``policy``, or the rule at the
    numbers given (:func:`policy_at`), or the decision's own policy.

    A decision settled before scoring (no evidence, a blank answer, equal answers) keeps its
    outcome under every policy and number, as the arbiter keeps it (its RAG answer is blank
    or absent, or equals Direct); the numbers are checked all the same. A decision made
    without scoring (:func:`made_unscored`) replays only to a side kept without margins.

    Raises:
        InvalidInputError: a bad number (:func:`policy_at`), an unknown recorded policy, or
            a policy given with numbers.
        UnscoredDecisionError: a decision made without scoring, replayed under a margin
            policy or to a side never produced.
        ValueError: a scored decision without margins (a damaged record).
    """
    chosen = _policy(decision, policy, lambda_bind, tau, variant)
    if made_unscored(decision):
        return _unscored_winner(decision, chosen)
    margins = recorded_margins(decision)
    if margins is None:
        return settled_kept(decision.reason,
                            decision.winner if decision.rag_candidates else 0)
    return chosen.decide(margins).kept


def replay(decision: RecordedDecision, policy: Policy | None = None, *,
           lambda_bind: float | None = None, tau: float | None = None,
           variant: Variant = "full") -> Choice:
    """The side kept (arguments as :func:`replay_winner`): ``"rag"`` when a RAG candidate is
    kept, else ``"direct"``."""
    kept = replay_winner(decision, policy, lambda_bind=lambda_bind, tau=tau, variant=variant)
    return "direct" if kept is None else "rag"


def replay_answer(decision: RecordedDecision, policy: Policy | None = None, *,
                  lambda_bind: float | None = None, tau: float | None = None,
                  variant: Variant = "full") -> str:
    """The kept answer's text as scored (arguments as :func:`replay_winner`): Direct's, the
    kept candidate's, or the pairwise RAG answer."""
    index = replay_winner(decision, policy, lambda_bind=lambda_bind, tau=tau, variant=variant)
    return decision.direct_answer if index is None else decision.candidates[index].answer


def kept_rag(decision: RecordedDecision) -> bool:
    """True when the decision, as made, keeps the RAG side (agreeing answers count as RAG)."""
    return replay(decision) == "rag"


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
