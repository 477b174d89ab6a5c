"""What two answers say differently: the parts of two texts that are compared (scored).

The paper scores two short answers whole. A chain's answers are chat text: a lead-in, the fact,
remarks, markdown, any language. Scoring such texts whole lets the framing decide, and scoring
a phrase list's idea of "the answer" lets a phrase missing from the list decide (two texts that
share an unlisted lead-in looked equal). This module finds the compared parts from the two
texts themselves, with no list of phrases in any language (:func:`differential`):

* both texts are split into words (Unicode letters and digits; each CJK character is a word)
  and aligned by their normalized form (:func:`~.answers.normalize_answer`: case, punctuation
  and markdown marks do not count);
* the texts **agree** only when the aligned words are all equal: two texts that differ in any
  word are scored, never reported as agreeing;
* the compared part of each side is its first *replaced* stretch of words (where the two texts
  say different things in the same place), scored as a continuation of the side's own text
  before it: the shared framing is context, not evidence. A stretch present on one side only
  (an added lead-in or remark) is not a competing statement and is compared only when the
  texts differ in nothing else; it is then widened by one shared neighbouring word so that
  both sides have something to score.

Later differences are consequences of the first (an answer restated at the end, a reason that
follows from it) and are not compared: they would add near-certain tokens that dilute the
length-normalized margins. Where the two texts are framed differently (one lead-in on each
side), the first replaced stretch can be the framing itself: that is what the ``extract`` form
(:mod:`~trustmargin_integrations.arbiter.comparisons`) is for.

The compared parts are character spans of the texts, recorded in the Decision, so anyone can
see what decided.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from trustmargin_integrations.answers import normalize_answer

# Ideographic scripts write words without spaces: each character is a word there.
_IDEOGRAPH = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_WORD = re.compile(rf"[{_IDEOGRAPH}]|[^\W{_IDEOGRAPH}]+", re.UNICODE)

@dataclass(frozen=True)
class Span:
    """A compared part of one text: ``text[start:end]``, scored after ``text[:start]``."""

    start: int
    end: int


@dataclass(frozen=True)
class Word:
    """One word of a text: its normalized form (the alignment key) and where it stands."""

    key: str
    start: int
    end: int


@dataclass(frozen=True)
class Comparison:
    """What is compared between two texts: agreement, or one list of spans per side."""

    agree: bool
    direct: tuple[Span, ...] = ()
    rag: tuple[Span, ...] = ()


def words(text: str) -> list[Word]:
    """The words of ``text`` with their normalized forms; words that normalize to nothing
    (an article, a lone underscore) are left out, as :func:`normalize_answer` leaves them."""
    out = []
    for match in _WORD.finditer(text):
        key = normalize_answer(unicodedata.normalize("NFKC", match.group()))
        if key:
            out.append(Word(key, match.start(), match.end()))
    return out


def differential(direct: str, rag: str) -> Comparison:
    """Align two texts by their words and say what is compared (see the module docstring).

    A text with no word has nothing to compare: both lists of spans are empty and the texts
    agree only if both are wordless (the caller settles blank answers before this matters).
    """
    left, right = words(direct), words(rag)
    if [w.key for w in left] == [w.key for w in right]:
        return Comparison(agree=bool(left))
    if not left or not right:
        return Comparison(agree=False)
    matcher = SequenceMatcher(None, [w.key for w in left], [w.key for w in right],
                              autojunk=False)
    opcodes = matcher.get_opcodes()
    changed = [op for op in opcodes if op[0] == "replace"]
    if not changed:
        # Only additions on one side: the first one, widened by a shared neighbour word.
        changed = [_widened(next(op for op in opcodes if op[0] != "equal"), len(left),
                            len(right))]
    _, i1, i2, j1, j2 = changed[0]
    return Comparison(agree=False, direct=(Span(left[i1].start, left[i2 - 1].end),),
                      rag=(Span(right[j1].start, right[j2 - 1].end),))


def _widened(op: tuple[str, int, int, int, int], n_left: int, n_right: int
             ) -> tuple[str, int, int, int, int]:
    """An insertion or deletion grown by one shared word, the next one when there is one,
    else the one before, so that neither side's span is empty."""
    tag, i1, i2, j1, j2 = op
    if i2 < n_left and j2 < n_right:
        return tag, i1, i2 + 1, j1, j2 + 1
    return tag, i1 - 1, i2, j1 - 1, j2


def scored_text(text: str, spans: Sequence[Span]) -> str:
    """The compared words of ``text`` as one string (the audit record's short form)."""
    return " … ".join(text[s.start:s.end] for s in spans)
