"""The plan: settle a question without the model when the rule allows it
(:func:`~trustmargin_integrations.rule.settle_among`), else say which candidates need
likelihoods, and the scoring requests that get them (all of a chunk in one session call)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trustmargin_integrations.arbiter.comparisons import Compared, Scored
from trustmargin_integrations.arbiter.preparation import VIEWS, PreparedQuestion
from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
)
from trustmargin_integrations.rule import Policy, Verdict, settle_among
from trustmargin_integrations.schema import ViewLikelihoods


@dataclass
class Plan:
    """What one question needs after settling: its verdict, or which candidates to score.

    ``scored`` are the RAG candidates whose likelihoods are computed; ``copies`` maps a
    candidate whose text repeats an earlier one's to that one (same text, same prompts:
    the same likelihoods, so it is scored once and the earlier one wins the tie);
    ``agreeing`` are the unscored ones equal to Direct, which enter the rule with the
    margins of identical answers (0; see :mod:`~trustmargin_integrations.rule.settled`).
    ``items`` is what the model scores (each side's pieces, each once) and ``pairs`` maps a
    scored candidate to the items of its Direct side and its own side: a generated pair
    shares one Direct item (the paper's scoring), a compared chat pair may score a part of
    Direct's text of its own.
    """

    verdict: Verdict | None
    blank: list[bool]
    scored: list[int] = field(default_factory=list)
    copies: dict[int, int] = field(default_factory=dict)
    agreeing: list[int] = field(default_factory=list)
    items: list[Scored] = field(default_factory=list)
    pairs: dict[int, tuple[int, int]] = field(default_factory=dict)
    fixed: Verdict | None = None
    """The verdict of a policy that keeps one side whatever the margins
    (:func:`plan_unscored`): nothing is scored and no margin exists."""
    note: str | None = None
    """A warning for the Decision about the plan (the margins not computed), else None."""


def plan_question(prepared: PreparedQuestion, direct: str, rag: list[str],
                  compared: list[Compared], *, is_blank: Callable[[str], bool],
                  skip_when_agree: bool) -> Plan:
    """Settle the question, or say which candidates need likelihoods (see :class:`Plan`).

    ``compared`` is each candidate's pair with Direct (:mod:`.comparisons`), whose ``agree``
    says when the answers agree; ``is_blank`` says whether an answer has nothing to score;
    ``skip_when_agree`` is the config's ``skip_scoring_when_agree``.
    """
    blank = [is_blank(answer) for answer in rag]
    agree = [skip_when_agree and not b and pair.agree
             for b, pair in zip(blank, compared, strict=True)]
    verdict = settle_among(has_evidence=prepared.has_evidence,
                           direct_blank=is_blank(direct), rag_blank=blank,
                           agree_unscored=agree)
    if verdict is not None:
        return Plan(verdict, blank)
    plan = Plan(None, blank, agreeing=[j for j in range(len(rag)) if agree[j]])
    first: dict[str, int] = {}
    index: dict[Scored, int] = {}

    def item(scored: Scored) -> int:
        if scored not in index:
            index[scored] = len(plan.items)
            plan.items.append(scored)
        return index[scored]

    for j, answer in enumerate(rag):
        if blank[j] or agree[j]:
            continue
        if answer in first:
            plan.copies[j] = first[answer]
        else:
            first[answer] = j
            plan.scored.append(j)
            plan.pairs[j] = (item(compared[j].direct), item(compared[j].rag))
    return plan


def plan_unscored(prepared: PreparedQuestion, direct: str | None, rag: list[str | None],
                  policy: Policy, *, is_blank: Callable[[str], bool]) -> Plan:
    """The plan of a question whose ``policy`` keeps one side whatever the margins
    (:meth:`~trustmargin_integrations.rule.Policy.unscored` gives its verdict): nothing is
    scored.

    It is settled as every question is (:func:`~trustmargin_integrations.rule.settle_among`:
    no passage, a blank answer) on the answers at hand; an answer not produced (None: the
    side the policy does not keep) cannot change the kept side and counts as not blank.
    Agreement is not tested: it can take the model (a chat answer's stated short answer),
    and the kept side's text is what the policy returns. Otherwise the policy's verdict
    stands, with a note that the margins were not computed.

    Raises:
        ValueError: ``policy`` needs margins for this question (call :func:`plan_question`).
    """
    verdict = policy.unscored(len(rag))
    if verdict is None:
        raise ValueError(f"policy {policy.name!r} needs margins for this question")
    blank = [answer is not None and is_blank(answer) for answer in rag]
    settled = settle_among(has_evidence=prepared.has_evidence,
                           direct_blank=direct is not None and is_blank(direct),
                           rag_blank=blank, agree_unscored=[False] * len(rag))
    if settled is not None:
        return Plan(settled, blank)
    return Plan(None, blank, fixed=verdict, note=(
        f"margins not computed: the policy {policy.label} keeps the "
        f"{'RAG' if verdict.choice == 'rag' else 'Direct'} answer whatever the margins, so "
        "nothing was scored (for the margins, decide under a margin policy such as "
        "policy='rule', or score_batch then decide)"))


def score_rows(
    session: ModelSession,
    rows: list[tuple[PreparedQuestion, list[Scored]]],
    positions: list[int],
) -> dict[int, list[ViewLikelihoods]]:
    """Every item's three-view likelihoods, all rows in one call, keyed by the row's
    position in its chunk.

    An item of one piece is one request per view, the paper's scoring: a generated pairwise
    row is Direct then RAG, each over the three views, the six requests in the order they
    have always been sent. An item of several pieces (one part in several framings) is scored
    piece by piece, each piece after the view prompt and the text before it, and its
    likelihood is the mean over all its tokens.
    """
    requests = [ContinuationRequest(getattr(p.views, view) + piece.prefix, piece.text)
                for p, items in rows for scored in items for view in VIEWS
                for piece in scored]
    flat = iter(session.score(requests))
    out: dict[int, list[ViewLikelihoods]] = {}
    for (_, items), pos in zip(rows, positions, strict=True):
        out[pos] = [view_likelihoods([[next(flat) for _ in scored] for _ in VIEWS])
                    for scored in items]
    return out


def view_likelihoods(scores: list[list[ContinuationScore]]) -> ViewLikelihoods:
    """One item's record from its pieces' scores under the three views (in ``VIEWS``
    order): per view, the log-probability of all its tokens over their count. Its length
    ``|y|`` is its first piece's: the pieces of one item are the same words read in several
    framings (:func:`~trustmargin_integrations.arbiter.comparisons.in_each_framing`), the
    first alone where it is read alone."""
    means = {view: sum(s.logprob_sum for s in pieces) / sum(s.num_tokens for s in pieces)
             for view, pieces in zip(VIEWS, scores, strict=True)}
    return ViewLikelihoods(**means, num_tokens=scores[0][0].num_tokens)
