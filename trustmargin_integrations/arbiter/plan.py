"""The plan: settle a question without the model when the rule allows it
(:func:`~trustmargin_integrations.margins.settle_among`), else say which candidates need
likelihoods, and the scoring requests that get them (all of a chunk in one session call)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trustmargin_integrations.answers import answers_agree
from trustmargin_integrations.arbiter.preparation import VIEWS, PreparedQuestion
from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
)
from trustmargin_integrations.margins import Verdict, settle_among
from trustmargin_integrations.schema import ViewLikelihoods


@dataclass
class Plan:
    """What one question needs after settling: its verdict, or which candidates to score.

    ``scored`` are the RAG candidates whose likelihoods are computed; ``copies`` maps a
    candidate whose text repeats an earlier one's to that one (same text, same prompts:
    the same likelihoods, so it is scored once and the earlier one wins the tie);
    ``agreeing`` are the unscored ones equal to Direct, which enter the rule with the
    margins of identical answers (0; see :mod:`~trustmargin_integrations.margins`).
    """

    verdict: Verdict | None
    blank: list[bool]
    scored: list[int] = field(default_factory=list)
    copies: dict[int, int] = field(default_factory=dict)
    agreeing: list[int] = field(default_factory=list)


def plan_question(prepared: PreparedQuestion, direct: str, rag: list[str], *,
                  is_blank: Callable[[str], bool], skip_when_agree: bool) -> Plan:
    """Settle the question, or say which candidates need likelihoods (see :class:`Plan`).

    ``is_blank`` says whether an answer has nothing to score; ``skip_when_agree`` is the
    config's ``skip_scoring_when_agree``.
    """
    blank = [is_blank(answer) for answer in rag]
    agree = [skip_when_agree and not b and answers_agree(direct, answer)
             for b, answer in zip(blank, rag, strict=True)]
    verdict = settle_among(has_evidence=prepared.has_evidence,
                           direct_blank=is_blank(direct), rag_blank=blank,
                           agree_unscored=agree)
    if verdict is not None:
        return Plan(verdict, blank)
    plan = Plan(None, blank, agreeing=[j for j in range(len(rag)) if agree[j]])
    first: dict[str, int] = {}
    for j, answer in enumerate(rag):
        if blank[j] or agree[j]:
            continue
        if answer in first:
            plan.copies[j] = first[answer]
        else:
            first[answer] = j
            plan.scored.append(j)
    return plan


def score_rows(
    session: ModelSession,
    rows: list[tuple[PreparedQuestion, list[str]]],
    positions: list[int],
) -> dict[int, list[ViewLikelihoods]]:
    """Every answer's three-view likelihoods (Direct first), all rows in one call, keyed by
    the row's position in its chunk.

    A pairwise row is Direct then RAG, each over the three views: the six requests
    in the order they have always been sent.
    """
    requests = [ContinuationRequest(getattr(p.views, view), answer)
                for p, answers in rows for answer in answers for view in VIEWS]
    flat = iter(session.score(requests))
    out: dict[int, list[ViewLikelihoods]] = {}
    for (_, answers), pos in zip(rows, positions, strict=True):
        out[pos] = [view_likelihoods([next(flat) for _ in VIEWS]) for _ in answers]
    return out


def view_likelihoods(scores: list[ContinuationScore]) -> ViewLikelihoods:
    """One answer's record from its scores under the three views (in ``VIEWS`` order)."""
    return ViewLikelihoods(**{view: s.mean for view, s in zip(VIEWS, scores, strict=True)},
                           num_tokens=scores[0].num_tokens)
