"""Questions decided before scoring: no passage, blank answers, answers that agree.

No passage: Direct (``no_evidence``). A blank candidate cannot win (all blank: Direct, reason
``rag_answer_blank`` / ``both_answers_blank``); a blank Direct keeps the first non-blank
candidate (``direct_answer_blank``); repeated candidates are scored once; candidates equal to
Direct are not scored (all: ``answers_agree``; some: they enter the rule with ``M = 0``, why:
docs/decisions.md). No policy changes a settled outcome.
"""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.rule.verdict import Verdict
from trustmargin_integrations.vocabulary import Reason, Side

SETTLED: dict[Reason, Side] = {
    "both_answers_blank": "direct",
    "rag_answer_blank": "direct",
    "direct_answer_blank": "rag",
    "answers_agree": "rag",
    "no_evidence": "direct",
}
"""Outcomes that no policy can change: they are decided before scoring."""


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


def settled_kept(reason: str, winner: int | None) -> int | None:
    """The RAG candidate a settled outcome keeps (``winner``: the recorded kept one, 0 for
    a pairwise question), None when it keeps Direct."""
    return None if SETTLED[reason] == "direct" else winner  # type: ignore[index]
