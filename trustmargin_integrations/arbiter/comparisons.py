"""What is scored for each pair (Direct, one RAG candidate): the paper's short answers for
generated candidates, and for text a user's chain produced the form the config names
(``TrustMarginConfig.scoring_form``, see :mod:`trustmargin_integrations.comparison`).

A pair's compared form is a list of *pieces* per side, each a continuation scored after the
view prompt and the side's own text before it; one piece with no prefix is the paper's
scoring of a whole short answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from trustmargin_integrations.answers import answer_complete, answers_agree, clean_answer
from trustmargin_integrations.arbiter.candidates import Candidate, cut_to_sentence
from trustmargin_integrations.arbiter.preparation import PreparedQuestion
from trustmargin_integrations.backends.base import ModelSession
from trustmargin_integrations.comparison import Span, differential, scored_text, words
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.prompts import extract_prompt
from trustmargin_integrations.schema import CompareForm

# A stated short answer is a phrase: a few tokens, never the whole text again.
EXTRACT_MAX_NEW_TOKENS = 16


@dataclass(frozen=True)
class Piece:
    """One continuation to score: ``text`` after the view prompt and ``prefix``."""

    prefix: str
    text: str


Scored = tuple[Piece, ...]
"""Everything scored for one side of a pair; its likelihood is the token-weighted mean."""


@dataclass(frozen=True)
class Compared:
    """One pair's compared form: agreement, what each side scores, and the audit record."""

    form: CompareForm
    agree: bool
    direct: Scored
    rag: Scored
    direct_text: str
    rag_text: str
    direct_spans: tuple[Span, ...] | None = None
    rag_spans: tuple[Span, ...] | None = None
    note: str | None = None
    """A warning for the Decision about how the pair was compared, else None."""


def whole(form: CompareForm, direct: str, rag: str, agree: bool | None = None) -> Compared:
    """Both texts scored whole (the paper's scoring of two short answers). ``agree`` is the
    pair's agreement when the caller's comparison found it already; the paper's
    (:func:`~trustmargin_integrations.answers.answers_agree`) otherwise: each pair is
    compared once."""
    if agree is None:
        agree = answers_agree(direct, rag)
    return Compared(form, agree, (Piece("", direct),), (Piece("", rag),), direct, rag)


def pieces(text: str, spans: tuple[Span, ...]) -> Scored:
    """The spans of ``text`` as continuations of the text before them. The space before a
    span belongs to it: tokenizers mark a word's leading space on the word's own token."""
    out = []
    for span in spans:
        cut = len(text[:span.start].rstrip())
        out.append(Piece(text[:cut], text[cut:span.end]))
    return tuple(out)


def by_difference(direct: str, rag: str) -> Compared:
    """The differential form (:func:`~trustmargin_integrations.comparison.differential`); texts
    that agree are scored whole should the caller score agreeing answers at all."""
    found = differential(direct, rag)
    if found.agree or not found.direct:
        return whole("differential", direct, rag, agree=found.agree)
    return Compared("differential", False, pieces(direct, found.direct), pieces(rag, found.rag),
                    scored_text(direct, found.direct), scored_text(rag, found.rag),
                    found.direct, found.rag)


def stated_in(short: str, text: str) -> bool:
    """True when the words of ``short`` occur, in order and together, among ``text``'s."""
    needle = [w.key for w in words(short)]
    hay = [w.key for w in words(text)]
    return bool(needle) and any(hay[i:i + len(needle)] == needle
                                for i in range(len(hay) - len(needle) + 1))


def compare_chunk(session: ModelSession, render: Callable[[str], str],
                  config: TrustMarginConfig, chunk: list[PreparedQuestion],
                  direct: list[Candidate], options: list[list[Candidate]]
                  ) -> list[list[Compared]]:
    """Every pair's compared form, per question and RAG candidate (one generation call for
    the whole chunk's extractions under ``scoring_form="extract"``; ``render`` is the
    backend's chat template)."""
    stated = _extractions(session, render, config, chunk, direct, options)
    out: list[list[Compared]] = []
    for i, (d, opts) in enumerate(zip(direct, options, strict=True)):
        row = []
        for o in opts:
            if (d.generated and o.generated) or not config.clean_answers:
                row.append(whole("paper" if config.clean_answers else "whole", d.answer,
                                 o.answer))
            elif cut_to_sentence(config, chunk[i]):
                # Cut by candidates.py already; see cut_to_sentence for why.
                row.append(whole("sentence", d.answer, o.answer))
            elif config.scoring_form == "extract":
                row.append(by_extraction(chunk[i].input.question, d, o, stated))
            else:
                row.append(by_difference(d.answer, o.answer))
        out.append(row)
    return out


def _extractions(session: ModelSession, render: Callable[[str], str],
                 config: TrustMarginConfig,
                 chunk: list[PreparedQuestion], direct: list[Candidate],
                 options: list[list[Candidate]]) -> dict[tuple[str, str], str]:
    """The short answer the model reads in each given text, keyed by (question, text)."""
    if config.scoring_form != "extract" or not config.clean_answers:
        return {}
    wanted: dict[tuple[str, str], str] = {}
    for p, d, opts in zip(chunk, direct, options, strict=True):
        if cut_to_sentence(config, p):
            continue  # compared on their answering sentence (see cut_to_sentence)
        for c in [d, *opts]:
            if not c.generated and c.answer.strip():
                question = p.input.question
                wanted[(question, c.answer)] = render(extract_prompt(question, c.answer))
    if not wanted:
        return {}
    texts = session.generate(list(wanted.values()), EXTRACT_MAX_NEW_TOKENS,
                             stop=answer_complete)
    return {key: clean_answer(t) for key, t in zip(wanted, texts, strict=True)}


def by_extraction(question: str, d: Candidate, o: Candidate,
                  stated: dict[tuple[str, str], str]) -> Compared:
    """The paper's scoring of both texts' stated short answers (``stated``: keyed by
    (question, text)). A text whose extraction does not occur in it (the model did not read
    it, it invented) is compared by difference, and so is a pair whose equal extractions only
    repeat the question: agreement must come from what the texts say."""
    short = [c.answer if c.generated else stated.get((question, c.answer), "")
             for c in (d, o)]
    if not all(stated_in(s, c.answer) for s, c in zip(short, (d, o), strict=True)):
        return replace(by_difference(d.answer, o.answer),
                       note="extraction not stated in its text; compared by difference")
    compared = whole("extract", short[0], short[1])
    if compared.agree and stated_in(short[0], question):
        # Measured on Qwen2.5-1.5B's CWQ chat answers: "Turkey uses the Turkish lira" and
        # "Cyprus uses the Turkish lira" were both read as "Turkish lira", the question's own
        # words. Equal extractions that the question already states are no evidence that the
        # texts agree (an answer among the question's options, "X or Y?", is still scored,
        # only not settled as agreement).
        return replace(by_difference(d.answer, o.answer),
                       note="both extractions repeat the question; compared by difference")
    return compared
