"""The decision rule of TrustMargin (Section 3 of the paper): pure arithmetic, no model.

This module is the one place the rule lives. The arbiter calls :func:`settle` and
:func:`decide` to make a decision, :meth:`Decision.replay` calls them again to replay a cached
decision under other hyper-parameters (the lambda x tau grid and the ablations), and
``Decision.chose_rag`` reads the replayed choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Choice = Literal["direct", "rag"]
"""The candidate a decision keeps."""

Variant = Literal["full", "no_prior", "no_bind"]
"""The full rule or one of the paper's ablations (w/o M_prior, w/o M_bind)."""

Reason = Literal[
    "margin_above_tau",
    "margin_at_or_below_tau",
    "answers_agree",
    "rag_answer_blank",
    "direct_answer_blank",
    "both_answers_blank",
    "no_evidence",
]
"""Why a decision came out as it did; the first two are the margin rule, the rest settle a
question before any likelihood is needed."""

SETTLED: dict[Reason, Choice] = {
    "both_answers_blank": "direct",
    "rag_answer_blank": "direct",
    "direct_answer_blank": "rag",
    "answers_agree": "rag",
    "no_evidence": "direct",
}
"""Outcomes that no lambda or tau can change: they are decided before scoring."""


class ThreeViews(Protocol):
    """One answer's length-normalized log-likelihoods under the three prompt views."""

    question_only: float
    question_context: float
    context_only: float


@dataclass(frozen=True)
class Margins:
    """The two margins and their combination for one question."""

    m_prior: float
    m_bind: float
    m: float


@dataclass(frozen=True)
class Verdict:
    """What the rule decided: the kept candidate, why, and the margins when scored."""

    choice: Choice
    reason: Reason
    margins: Margins | None = None


def compute_margins(direct: ThreeViews, rag: ThreeViews, lambda_bind: float) -> Margins:
    """Margins from the two answers' likelihoods under the three views.

    ``M_prior = l_D(y_R) - l_D(y_D)``,
    ``M_bind = [l_R(y_R) - l_C(y_R)] - [l_R(y_D) - l_C(y_D)]``,
    ``M = M_prior + lambda_bind * M_bind``.
    """
    m_prior = rag.question_only - direct.question_only
    m_bind = (rag.question_context - rag.context_only) - (
        direct.question_context - direct.context_only
    )
    return Margins(m_prior=m_prior, m_bind=m_bind, m=m_prior + lambda_bind * m_bind)


def combined_margin(
    m_prior: float, m_bind: float, lambda_bind: float, variant: Variant = "full"
) -> float:
    """``M`` of the full rule, or of an ablation that drops one margin."""
    if variant == "full":
        return m_prior + lambda_bind * m_bind
    if variant == "no_prior":
        return lambda_bind * m_bind
    if variant == "no_bind":
        return m_prior
    raise ValueError(f"unknown variant {variant!r}; use 'full', 'no_prior' or 'no_bind'")


def decide(
    m_prior: float, m_bind: float, lambda_bind: float, tau: float, variant: Variant = "full"
) -> Verdict:
    """The sparse rule: keep the RAG answer only when ``M > tau`` (a tie keeps Direct)."""
    m = combined_margin(m_prior, m_bind, lambda_bind, variant)
    use_rag = m > tau
    return Verdict(
        choice="rag" if use_rag else "direct",
        reason="margin_above_tau" if use_rag else "margin_at_or_below_tau",
        margins=Margins(m_prior=m_prior, m_bind=m_bind, m=m),
    )


def settle(
    *, has_evidence: bool, direct_blank: bool, rag_blank: bool, agree_unscored: bool
) -> Verdict | None:
    """Decide without likelihoods when the margins cannot matter; None means "score it".

    Args:
        has_evidence: at least one passage was retrieved.
        direct_blank: the Direct answer has no scorable token.
        rag_blank: the RAG answer has no scorable token.
        agree_unscored: both answers normalize equal and scoring them was skipped.
    """
    reason: Reason | None = None
    if not has_evidence:
        reason = "no_evidence"
    elif direct_blank and rag_blank:
        reason = "both_answers_blank"
    elif rag_blank:
        reason = "rag_answer_blank"
    elif direct_blank:
        reason = "direct_answer_blank"
    elif agree_unscored:
        reason = "answers_agree"
    return None if reason is None else Verdict(SETTLED[reason], reason)
