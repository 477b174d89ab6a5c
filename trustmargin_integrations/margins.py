"""The decision rule of TrustMargin (Section 3 of the paper): pure arithmetic, no model.

This module is the one place the rule lives. The arbiter calls :func:`settle_among` and
:func:`decide_among` to make a decision, :meth:`Decision.replay` calls them again to replay a
cached decision under other hyper-parameters (the lambda x tau grid and the ablations), and
``Decision.chose_rag`` reads the replayed choice. The pairwise functions :func:`settle` and
:func:`decide` are their one-candidate cases, so there is one rule, not two.

The rule with several RAG-side candidates (say the answers of BM25-RAG, IRCoT and DTR):

    For each RAG candidate i compute its margins against Direct exactly as in the pairwise
    rule, from the same three-view likelihoods under the same passage context:
    ``M_i = M_prior,i + lambda_bind * M_bind,i``. Keep Direct unless ``max_i M_i > tau``;
    otherwise keep the candidate with the largest ``M_i`` (a tie keeps the earlier
    candidate in the caller's list).

Why: each ``M_i`` is the pairwise evidence that candidate i should override Direct, on one
scale and against one threshold, so ``tau`` keeps the paper's meaning (Direct is the default
and is overridden sparsely). And since every margin is a difference of per-answer terms,
``M_i - M_j`` is exactly the margin of candidate i over candidate j computed directly (the
Direct terms cancel): the candidate with the largest ``M_i`` is the one that beats every
other candidate pairwise. With one candidate the rule is the pairwise rule, term for term.

Settling before scoring, extended to several candidates (:func:`settle_among`):

* no passage entered the context: Direct (``no_evidence``), whatever the candidates;
* a blank candidate (no scorable token) cannot win: it gets no likelihoods and no margins;
  when every candidate is blank Direct is kept (``rag_answer_blank``, or
  ``both_answers_blank`` when Direct is blank too);
* a candidate whose text (after cleaning) repeats an earlier candidate's exactly is scored
  once: the same text under the same prompts has the same likelihoods, and the tie rule
  keeps the earlier one;
* a blank Direct has no likelihood, so no margin exists: the first non-blank candidate in
  the caller's list is kept (``direct_answer_blank``), the list order being the caller's
  preference, as it is for ties;
* a candidate that normalizes equal to Direct *is* Direct's answer. When every non-blank
  candidate does, nothing is scored (``answers_agree``, the first of them is kept, as the
  pairwise rule keeps the RAG side of equal answers). When only some do, those are not
  scored but enter the rule with ``M = 0``, the margins of identical answers (see
  :func:`compute_margins`). Dropping them instead would change the outcome whenever
  ``tau < 0``: a candidate j with ``tau < M_j < 0`` loses pairwise to an equal-to-Direct
  candidate, yet would win if that candidate were left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Choice = Literal["direct", "rag"]
"""The side a decision keeps."""

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
    "policy_always_rag",
    "policy_always_direct",
]
"""Why a decision came out as it did; the first two are the margin rule (under the paper's
rule or a one-margin policy), the next five settle a question before any likelihood is
needed, and the last two name the single-source policy that decided a scored question. With
several RAG candidates, ``rag_answer_blank`` means every candidate is blank,
``both_answers_blank`` that Direct is blank too, and ``answers_agree`` that every non-blank
candidate normalizes equal to Direct."""

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
    """What the rule decided: the kept side, why, and the margins when scored.

    ``candidate`` is the index of the RAG candidate the verdict is about: the kept one when
    ``choice`` is ``"rag"``; the best-margin one (whose ``margins`` these are) when a scored
    verdict keeps Direct; None when a settled verdict keeps Direct.
    """

    choice: Choice
    reason: Reason
    margins: Margins | None = None
    candidate: int | None = None


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


def overrides(m: Any, tau: Any) -> Any:
    """Whether a margin overrides Direct: ``M > tau``, strictly (``M == tau`` keeps Direct,
    as in the paper). Works on floats and, elementwise, on numpy arrays (the calibration grid
    evaluates every lambda x tau cell at once with it and :func:`combined_margin`)."""
    return m > tau


def decide_among(
    margins: Sequence[tuple[float, float] | None],
    lambda_bind: float,
    tau: float,
    variant: Variant = "full",
) -> Verdict:
    """The rule over several RAG candidates: keep Direct unless ``max_i M_i > tau``, else
    the candidate with the largest ``M_i`` (a tie keeps the earlier one).

    Args:
        margins: ``(M_prior_i, M_bind_i)`` of each candidate against Direct, in the caller's
            order; None for a candidate that cannot win (a blank one).
        lambda_bind, tau, variant: the hyper-parameters and the rule or ablation.

    Returns:
        A verdict whose ``candidate`` is the best-margin candidate (kept when ``choice`` is
        ``"rag"``) and whose ``margins`` are that candidate's.

    Raises:
        ValueError: no candidate has margins (settle such questions with
            :func:`settle_among`), or the variant is unknown.
    """
    best: int | None = None
    best_key = -math.inf
    for i, pair in enumerate(margins):
        if pair is None:
            continue
        m = combined_margin(pair[0], pair[1], lambda_bind, variant)
        # A NaN margin cannot beat a real one (every comparison with NaN is false), but it
        # must not block the real margins after it either: rank it as -inf.
        key = -math.inf if math.isnan(m) else m
        if best is None or key > best_key:  # strict: a tie keeps the earlier candidate
            best, best_key = i, key
    if best is None:
        raise ValueError("no candidate has margins: settle the question instead")
    m_prior, m_bind = margins[best]  # type: ignore[misc]
    m = combined_margin(m_prior, m_bind, lambda_bind, variant)
    use_rag = bool(overrides(m, tau))
    return Verdict(
        choice="rag" if use_rag else "direct",
        reason="margin_above_tau" if use_rag else "margin_at_or_below_tau",
        margins=Margins(m_prior=m_prior, m_bind=m_bind, m=m),
        candidate=best,
    )


def decide(
    m_prior: float, m_bind: float, lambda_bind: float, tau: float, variant: Variant = "full"
) -> Verdict:
    """The sparse rule: keep the RAG answer only when ``M > tau`` (a tie keeps Direct).

    The one-candidate case of :func:`decide_among`.
    """
    return decide_among([(m_prior, m_bind)], lambda_bind, tau, variant)


def settle_among(
    *,
    has_evidence: bool,
    direct_blank: bool,
    rag_blank: Sequence[bool],
    agree_unscored: Sequence[bool],
) -> Verdict | None:
    """Decide without likelihoods when no margin can matter; None means "score it".

    The rules and their reasons are in the module docstring. A kept candidate's index is
    the verdict's ``candidate``.

    Args:
        has_evidence: at least one passage entered the context.
        direct_blank: the Direct answer has no scorable token.
        rag_blank: per RAG candidate, it has no scorable token.
        agree_unscored: per RAG candidate, it normalizes equal to Direct and scoring it is
            skipped.
    """
    if len(rag_blank) != len(agree_unscored):
        raise ValueError("rag_blank and agree_unscored need one entry per candidate")
    usable = [i for i, blank in enumerate(rag_blank) if not blank]
    reason: Reason | None = None
    if not has_evidence:
        reason = "no_evidence"
    elif not usable:
        reason = "both_answers_blank" if direct_blank else "rag_answer_blank"
    elif direct_blank:
        reason = "direct_answer_blank"
    elif all(agree_unscored[i] for i in usable):
        reason = "answers_agree"
    if reason is None:
        return None
    choice = SETTLED[reason]
    return Verdict(choice, reason, candidate=usable[0] if choice == "rag" else None)


def settle(
    *, has_evidence: bool, direct_blank: bool, rag_blank: bool, agree_unscored: bool
) -> Verdict | None:
    """Decide without likelihoods when the margins cannot matter; None means "score it".

    The one-candidate case of :func:`settle_among`.

    Args:
        has_evidence: at least one passage was retrieved.
        direct_blank: the Direct answer has no scorable token.
        rag_blank: the RAG answer has no scorable token.
        agree_unscored: both answers normalize equal and scoring them was skipped.
    """
    return settle_among(has_evidence=has_evidence, direct_blank=direct_blank,
                        rag_blank=[rag_blank], agree_unscored=[agree_unscored])
