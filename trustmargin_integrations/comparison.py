"""Where two texts say different things: the stretches of two chat answers that can be compared.

The paper scores two short answers whole. A chain's answers are chat text: a lead-in, the fact,
remarks, markdown, citations, any language, and the two sides of one chain are often framed
differently (a RAG chain cites its context, the closed-book one does not). Both texts are read
losslessly (:mod:`.reading`) and aligned token by token, with no list of phrases in any
language (:func:`differential`):

* the texts **agree** only when their readings are equal;
* every stretch where both texts say something different in the same place (a *replaced*
  stretch) is a candidate for the answer-bearing part. A stretch present on one side only (a
  lead-in, a caveat, a citation one chain adds) is no competing statement and is a candidate
  only when the texts differ in nothing else; it is then widened by one shared neighbouring
  token so that both sides have something to score. A stretch whose every token on both sides
  is a word of the question restates the question and is set aside while another remains;
* each stretch is widened to whole words (``5%`` against ``5‰``, not ``%`` against ``‰``) and
  scored as a continuation of its side's own text before it: the text before is context, not
  evidence.

Which candidate stretch carries the answer is decided by what the question asks: the one that
stands next to the most words of the question (:func:`near_question`), and among equals the one
whose likelihood depends most on the question once scored
(:func:`~trustmargin_integrations.arbiter.comparisons.answer_bearing`). The compared parts are
character spans of the texts, recorded in the Decision, so anyone can see what decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from trustmargin_integrations.reading import Token, is_ideograph, keys, read

MAX_STRETCHES = 4
"""Candidate stretches scored per pair at most (the first ones in text order): texts that
differ in more places are long answers whose later differences follow from the first ones."""


@dataclass(frozen=True)
class Span:
    """A compared part of one text: ``text[start:end]``, scored after ``text[:start]``."""

    start: int
    end: int


@dataclass(frozen=True)
class Stretch:
    """One place where the two texts differ: Direct's span and RAG's in the given texts, the
    same in their :func:`~trustmargin_integrations.reading.plain` forms (what is scored), and
    ``asked``: how many of the question's words stand next to it (:func:`near_question`)."""

    direct: Span
    direct_plain: Span
    rag: Span
    rag_plain: Span
    asked: int = 0


@dataclass(frozen=True)
class Comparison:
    """Two texts compared: agreement, or the candidate stretches (text order; empty when a
    text has nothing to read, and the texts are then compared whole)."""

    agree: bool
    stretches: tuple[Stretch, ...] = ()


def differential(direct: str, rag: str, question: str = "") -> Comparison:
    """Read and align two texts and say where they differ (see the module docstring)."""
    left, right = read(direct), read(rag)
    if [t.key for t in left] == [t.key for t in right]:
        return Comparison(agree=bool(left))
    if not left or not right:
        return Comparison(agree=False)
    matcher = SequenceMatcher(None, [t.key for t in left], [t.key for t in right],
                              autojunk=False)
    opcodes = matcher.get_opcodes()
    changed = [op for op in opcodes if op[0] == "replace"]
    if not changed:
        changed = [_widened(op, len(left), len(right)) for op in opcodes if op[0] != "equal"]
    asked = set(keys(question))
    answering = [op for op in changed
                 if not {t.key for t in (*left[op[1]:op[2]], *right[op[3]:op[4]])} <= asked]
    chosen = (answering or changed)[:MAX_STRETCHES]
    return Comparison(agree=False, stretches=tuple(
        Stretch(*_span(left, i1, i2), *_span(right, j1, j2),
                near_question(left, i1, i2, asked) + near_question(right, j1, j2, asked))
        for _, i1, i2, j1, j2 in chosen))


NEAR = 6
"""Tokens on each side of a stretch that :func:`near_question` looks at."""


def near_question(tokens: Sequence[Token], i1: int, i2: int, asked: set[str]) -> int:
    """How many distinct words of the question stand within :data:`NEAR` tokens of
    ``tokens[i1:i2]``: an answer is stated next to the words of what was asked ("the bridge
    was designed by X", "X designed the bridge"); a lead-in, a caveat or a citation is not."""
    around = {t.key for t in (*tokens[max(0, i1 - NEAR):i1], *tokens[i2:i2 + NEAR])}
    return len(around & asked)


def _widened(op: tuple[str, int, int, int, int], n_left: int, n_right: int
             ) -> tuple[str, int, int, int, int]:
    """An insertion or deletion grown by one shared token, the next one when there is one,
    else the one before, so that neither side's span is empty."""
    tag, i1, i2, j1, j2 = op
    if i2 < n_left and j2 < n_right:
        return tag, i1, i2 + 1, j1, j2 + 1
    return tag, i1 - 1, i2, j1 - 1, j2


def _span(tokens: Sequence[Token], i1: int, i2: int) -> tuple[Span, Span]:
    """The place of ``tokens[i1:i2]`` in the text, widened to whole words: over the tokens
    that touch it without a space between (``5`` before ``%``, ``-`` inside ``e-mail``).
    Markdown marks and sentence punctuation are no tokens and are not taken in, and neither
    are the neighbours of an ideograph (each is a word of its own)."""
    while i1 > 0 and _touch(tokens[i1 - 1], tokens[i1]):
        i1 -= 1
    while i2 < len(tokens) and _touch(tokens[i2 - 1], tokens[i2]):
        i2 += 1
    first, last = tokens[i1], tokens[i2 - 1]
    return Span(first.start, last.end), Span(first.plain_start, last.plain_end)


def _touch(before: Token, after: Token) -> bool:
    return before.plain_end == after.plain_start and not (is_ideograph(before.key[:1])
                                              or is_ideograph(after.key[:1]))


def scored_text(text: str, spans: Sequence[Span]) -> str:
    """The compared words of ``text`` as one string (the audit record's short form)."""
    return " … ".join(text[s.start:s.end] for s in spans)
