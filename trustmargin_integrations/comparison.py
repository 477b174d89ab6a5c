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
* a stretch that continues text both sides share ends at its first clause end (``X, but I am
  not sure``: the caveat is no part of the answer), and is widened to whole words (``5%``
  against ``5‰``, not ``%`` against ``‰``);
* it is scored in the plain form of its text (what a reader sees), as a continuation of the
  text before it *within its clause* ("the answer is", "designed by", "New" before "York"):
  a lead-in or a framing sentence before the clause never enters the likelihoods, so a short
  answer behind "Hello!" or a markdown heading is scored exactly as the bare answer is.

Which candidate stretch carries the answer is decided once they are scored, by what the question
asks (:func:`~trustmargin_integrations.arbiter.comparisons.answer_bearing`). The compared parts
are character spans of the texts, recorded in the Decision, so anyone can see what decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from trustmargin_integrations.reading import Token, is_ideograph, keys, plain, read

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
    """One place where the two texts differ: for each side its span in the given text, the
    same span in the text's :func:`~trustmargin_integrations.reading.plain` form (what is
    scored), and where the clause that holds it begins in the plain form (the text before the
    span within that clause is its scoring context)."""

    direct: Span
    direct_plain: Span
    direct_clause: int
    rag: Span
    rag_plain: Span
    rag_clause: int


@dataclass(frozen=True)
class Comparison:
    """Two texts compared: agreement, or the candidate stretches (text order; empty when a
    text has nothing to read, and the texts are then compared whole)."""

    agree: bool
    stretches: tuple[Stretch, ...] = ()


# Where a clause ends: the context of a compared part reaches back to the last one, and a
# compared part that continues shared text stops at the first one ("X, but I am not sure").
_CLAUSE_END = frozenset(".,;:!?…()[]{}\n\"«»。、，！？：；（）「」『』【】〔〕")


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
    changed: list[tuple[str, int, int, int, int]] = [op for op in opcodes if op[0] == "replace"]
    if not changed:
        changed = [_widened(op, len(left), len(right)) for op in opcodes if op[0] != "equal"]
    asked = set(keys(question))
    answering = [op for op in changed
                 if not {t.key for t in (*left[op[1]:op[2]], *right[op[3]:op[4]])} <= asked]
    chosen = (answering or changed)[:MAX_STRETCHES]
    shown = plain(direct), plain(rag)
    return Comparison(agree=False, stretches=tuple(
        Stretch(*_side(shown[0], left, i1, i2), *_side(shown[1], right, j1, j2))
        for _, i1, i2, j1, j2 in chosen))


def _widened(op: tuple[str, int, int, int, int], n_left: int, n_right: int
             ) -> tuple[str, int, int, int, int]:
    """An insertion or deletion grown by one shared token, the next one when there is one,
    else the one before, so that neither side's span is empty."""
    tag, i1, i2, j1, j2 = op
    if i2 < n_left and j2 < n_right:
        return tag, i1, i2 + 1, j1, j2 + 1
    return tag, i1 - 1, i2, j1 - 1, j2


def _side(shown: str, tokens: Sequence[Token], i1: int, i2: int) -> tuple[Span, Span, int]:
    """One side of a stretch: ``tokens[i1:i2]``, cut at its first clause end when it
    continues text both sides share, widened to whole words (over the tokens that touch it
    without a space: ``5`` before ``%``; never over an ideograph, each a word of its own);
    its span in the given text, in the plain text, and where its clause begins there."""
    if i1 > 0:
        cut = next((k for k in range(i1 + 1, i2)
                    if _ends_clause(shown, tokens[k - 1], tokens[k])), i2)
        i2 = cut
    while i1 > 0 and _touch(tokens[i1 - 1], tokens[i1]):
        i1 -= 1
    while i2 < len(tokens) and _touch(tokens[i2 - 1], tokens[i2]):
        i2 += 1
    first, last = tokens[i1], tokens[i2 - 1]
    clause = max((k + 1 for k in range(first.plain_start) if shown[k] in _CLAUSE_END),
                 default=0)
    while clause < first.plain_start and shown[clause].isspace():
        clause += 1
    return Span(first.start, last.end), Span(first.plain_start, last.plain_end), clause


def _ends_clause(shown: str, before: Token, after: Token) -> bool:
    return any(c in _CLAUSE_END for c in shown[before.plain_end:after.plain_start])


def _touch(before: Token, after: Token) -> bool:
    return before.plain_end == after.plain_start and not (is_ideograph(before.key[:1])
                                                          or is_ideograph(after.key[:1]))


def scored_text(text: str, spans: Sequence[Span]) -> str:
    """The compared words of ``text`` as one string (the audit record's short form)."""
    return " … ".join(text[s.start:s.end] for s in spans)
