"""Candidates: each side's answer, given or generated. A generation under the paper's prompts
is cut to its short answer by the paper's policy
(:func:`~trustmargin_integrations.answers.clean_answer`); a given text is kept whole, and what
of it is scored is decided per pair (:mod:`.comparisons`), except under
``scoring_form="paper"`` (the product's own short answers given back), whose cut of a given
answer by the same policy is reported as a warning."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from trustmargin_integrations.answers import answer_complete, clean_answer
from trustmargin_integrations.arbiter.preparation import PreparedQuestion
from trustmargin_integrations.backends.base import ModelSession
from trustmargin_integrations.config import TrustMarginConfig


@dataclass
class Candidate:
    """One side's answer as it will be scored, with its pre-cleaning text and timing."""

    answer: str
    raw: str | None
    generated: bool
    seconds: float = 0.0
    name: str | None = None
    note: str | None = None
    """A warning for the Decision when its form changed (a given text cut), else None."""
    absent: bool = False
    """Neither given nor generated: not needed (no passage for a RAG answer, or the other
    side of a question whose policy keeps one side whatever the margins)."""


def side_candidates(
    session: ModelSession, config: TrustMarginConfig, chunk: list[PreparedQuestion], side: str,
    wanted: Sequence[bool] | None = None,
) -> list[Candidate]:
    """Both given and generated candidates of one side (``"direct"`` or ``"rag"``), cleaned
    by the one policy; the missing ones are generated in one session call, only for the
    questions ``wanted`` marks (all by default; the others' missing candidates are
    ``absent``)."""
    given = [getattr(p.input, f"{side}_answer") for p in chunk]
    out: list[Candidate | None] = [None] * len(chunk)
    for i, text in enumerate(given):
        if text is not None:
            short = cut_to_short_answer(config, chunk[i])
            out[i] = cleaned(config, text, generated=False, short=short)
            if out[i].raw is not None and short:  # type: ignore[union-attr]
                out[i].note = (f"{side}_answer: scored on its short form "  # type: ignore[union-attr]
                               f"({text!r} -> {out[i].answer!r})")  # type: ignore[union-attr]
    # A RAG answer without evidence is never needed: the decision is "no_evidence".
    # A question with rag_candidates has its RAG side given: nothing is generated.
    todo = [i for i, p in enumerate(chunk)
            if out[i] is None and (wanted is None or wanted[i]) and (side == "direct" or (
                p.has_evidence and p.input.rag_candidates is None))]
    if todo:
        view = "question_only" if side == "direct" else "question_context"
        start = time.perf_counter()
        raw = session.generate([getattr(chunk[i].views, view) for i in todo],
                               config.max_new_tokens, stop=answer_complete)
        share = (time.perf_counter() - start) / len(todo)
        for i, text in zip(todo, raw, strict=True):
            out[i] = cleaned(config, text, generated=True, seconds=share)
    return [c or Candidate("", None, False, absent=True) for c in out]


def cut_to_short_answer(config: TrustMarginConfig, prepared: PreparedQuestion) -> bool:
    """True when a given candidate is cut to its short answer by the paper's policy, as a
    generation is: under ``scoring_form="paper"`` (the product's own short answers given back
    as texts: a noise run's, another pipeline's), and for a question with several RAG
    candidates (other pipelines' short answers, each compared with one Direct form so that
    Direct is scored once; the differential form is pairwise)."""
    return config.clean_answers and (config.scoring_form == "paper"
                                     or prepared.input.rag_candidates is not None)


def cleaned(config: TrustMarginConfig, text: str, *, generated: bool,
            seconds: float = 0.0, short: bool = False) -> Candidate:
    """``text`` as a candidate (``raw`` keeps the original when the candidate's form changed
    more than surrounding whitespace).

    A generation under the paper's prompts is cut by the paper's policy
    (:func:`~trustmargin_integrations.answers.clean_answer`) when the config cleans answers. A
    given candidate, often a chat answer in full sentences, stays whole: the pair's
    comparison decides what of it is scored. Only ``short`` (:func:`cut_to_short_answer`)
    cuts it here, by the same policy as a generation.
    """
    if not config.clean_answers:
        answer = text.strip()
    elif generated:
        answer = clean_answer(text)
    else:
        answer = clean_answer(text) if short else text.strip()
    raw = None if answer == text.strip() else text
    return Candidate(answer, raw, generated, seconds)


def rag_options(config: TrustMarginConfig, prepared: PreparedQuestion,
                rag: Candidate) -> list[Candidate]:
    """The RAG-side candidates of one question: the pairwise answer, or the given list
    cleaned by the one policy (a change is reported like a cleaned ``rag_answer``)."""
    given = prepared.input.rag_candidates
    if given is None:
        return [rag]
    out = []
    for i, (label, text) in enumerate(given):
        option = cleaned(config, text, generated=False, short=cut_to_short_answer(config, prepared))
        option.name = label
        if option.raw is not None:
            option.note = (f"rag_candidates[{i}]: scored on its short form "
                           f"({text!r} -> {option.answer!r})")
        out.append(option)
    return out
