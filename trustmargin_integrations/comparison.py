"""Where two texts say different things: the stretches of two chat answers that can be compared.

The paper scores two short answers whole. A chain's answers are chat text: a lead-in, the fact,
remarks, markdown, citations, any language, and the two sides of one chain are often framed
differently (a RAG chain cites its context, the closed-book one does not). Both texts are read
losslessly (:mod:`.reading`) and aligned token by token, with no list of phrases in any
language (:func:`differential`):

* the texts **agree** only when their readings are equal;
* the candidates for the answer-bearing part, grouped by the *place* where the texts differ,
  are every stretch where both texts say something different in the same place (a *replaced*
  stretch), the same stretch clause by clause within each side's first sentence ("The
  documents state the answer: X (see Passage 0)"; a later sentence is a remark, not a reading
  of the answer), and less a first or last word that the other text also says elsewhere (the
  two chains put their answers in different places around shared framing words) or less a
  first word where the other side's part begins a clause of its own ("is German" against
  "Answer: Sweden"). A stretch present on one side only (a lead-in, a caveat, a citation, a
  remark, or the word that tells "Golden Globe Award" from "Golden Globe") is a candidate
  too, widened by the shared token before it (else after it) so that both sides have
  something to score. A candidate whose every token on both sides is a word of the question
  restates the question, and a lead-in one text adds before a word of the question frames
  the question's subject ("The passages say that the answer is Tom" against "Tom" in "Tom
  Brady played for ..."): both are set aside while another candidate remains; one whose two
  sides read alike is dropped (none left: the texts are compared whole);
* a stretch that continues text both sides share ends at its first clause end (``X, but I am
  not sure``: the caveat is no part of the answer), and is widened to whole words (``5%``
  against ``5‰``, not ``%`` against ``‰``);
* it is scored in the plain form of its text (what a reader sees), as a continuation of the
  text before it *within its clause* ("the answer is", "designed by", "New" before "York"):
  a lead-in or a framing sentence before the clause never enters the likelihoods, so a short
  answer behind "Hello!" or a markdown heading is scored exactly as the bare answer is. Each
  side's part is scored alone and after both sides' clause words ("I believe it stands in" /
  "The passages say that the bridge stands in"), its likelihood the mean over them
  (:func:`~trustmargin_integrations.arbiter.comparisons.in_each_framing`), so the words one
  chain writes before its answer cannot raise that side alone.

Which candidates carry the two answers is decided once they are scored, by what the question
raises (:func:`~trustmargin_integrations.arbiter.comparisons.answer_bearing`). The
compared parts are character spans of the texts, recorded in the Decision, so anyone can see
what decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from itertools import pairwise

from trustmargin_integrations.reading import Token, is_ideograph, keys, plain, read

MAX_PLACES = 4
"""Places where the texts differ whose candidates are scored, at most (the first ones in text
order): texts that differ in more places are long answers whose later differences follow from
the first ones."""

RESTATED_SHARE = 0.5
"""A text *restates the question* when it says at least this share of the question's distinct
words (:func:`restates_question`): an answer may share a few of the question's words ("the
International Boxing Hall of Fame" for "... recognized by what larger Hall of Fame?"); a
restatement says most of them."""

Op = tuple[str, int, int, int, int]
"""An alignment opcode of :class:`difflib.SequenceMatcher`: tag, left and right token ranges."""


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
    place: int = 0
    """Which place where the texts differ this candidate reads (0 is the first in text order);
    a place's candidates are listed with its whole stretch first."""


@dataclass(frozen=True)
class Comparison:
    """Two texts compared: agreement, or the candidate stretches (empty when a text has
    nothing to read or no candidate tells the texts apart; they are then compared whole)."""

    agree: bool
    stretches: tuple[Stretch, ...] = ()


# Where a clause ends: the context of a compared part reaches back to the last one, and a
# compared part that continues shared text stops at the first one ("X, but I am not sure").
_CLAUSE_END = frozenset(".,;:!?…()[]{}\n\"«»。、，！？：；（）「」『』【】〔〕")
_SENTENCE_END = frozenset(".!?…\n。！？")


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
    shown = plain(direct), plain(rag)
    # Each place where the texts differ offers its whole stretch and its readings clause by
    # clause and less a framing word; which one carries the answer is not decided here, nor
    # by position, but by the question once they are scored. A stretch one side adds is a
    # place too: where the two chains' framings also differ, the answers may differ only by
    # an added word ("Golden Globe Award" against "Golden Globe").
    differing = [op for op in opcodes if op[0] != "equal"]
    places = [[op, *_by_clause(op, shown, left, right), *_less_shared_word(op, left, right),
               *_less_connective(op, shown, left, right)]
              if op[0] == "replace" else [_widened(op)]
              for op in differing]
    asked = set(keys(question))
    answering = [[] if _leads_into_question(op, left, asked)
                 else [c for c in ops
                       if not {t.key for t in (*left[c[1]:c[2]], *right[c[3]:c[4]])} <= asked]
                 for op, ops in zip(differing, places, strict=True)]
    if not any(answering):
        answering = places
    stretches: list[Stretch] = []
    place = 0
    for ops in answering:
        if place == MAX_PLACES:
            break
        for _, i1, i2, j1, j2 in ops:
            stretch = Stretch(*_side(shown[0], left, i1, i2), *_side(shown[1], right, j1, j2),
                              place)
            # A candidate whose two sides read alike (an addition cut away at its clause
            # end: "It is Bolivia, I think.") cannot tell the answers apart, and a place
            # left with none takes no place of MAX_PLACES.
            if stretch not in stretches and (_keys_in(left, stretch.direct_plain)
                                             != _keys_in(right, stretch.rag_plain)):
                stretches.append(stretch)
        if stretches and stretches[-1].place == place:
            place += 1
    # None left (each was cut to shared text: "It is Bolivia, I think." against "It is
    # Bolivia."): the texts are compared whole, so what one adds still counts.
    return Comparison(agree=False, stretches=tuple(stretches))


def restates_question(question: str, text: str) -> bool:
    """True when ``text`` says at least :data:`RESTATED_SHARE` of the question's distinct
    words (readings, so in any language and script): a sentence built around the question
    ("The currency used in the country whose anthem is the Song of Velmora is the Velmoran mark."),
    not a short answer. A scorer's "extraction" that does so is not used
    (:func:`~trustmargin_integrations.arbiter.comparisons.by_extraction`)."""
    asked = set(keys(question))
    return bool(asked) and question_words_said(asked, text) >= RESTATED_SHARE * len(asked)


def question_words_said(asked: set[str], text: str) -> int:
    """How many of the question's distinct words (``asked``: the readings of its words)
    ``text`` says: what restates the question, and what a framing copies from it."""
    return len(asked & set(keys(text)))


def _keys_in(tokens: Sequence[Token], span: Span) -> list[str]:
    """The reading of the tokens inside a plain-text span (code keeps its case)."""
    return [t.key for t in tokens if span.start <= t.plain_start < span.end]


def _leads_into_question(op: Op, left: Sequence[Token], asked: set[str]) -> bool:
    """Whether ``op`` is a lead-in one text adds before all that both say, whose first shared
    word is a word of the question ("The passages say that the answer is" before "Tom Brady
    played for ...", for "... did Tom Brady play for?"). Widened to that word, it would be
    compared as an answer, and the question raises its own word because it copies it, not
    because it answers. An addition after a shared word may be an answer's own word
    ("Rahul Vikram Mehta" against "Rahul Mehta" for "Who is older, Lena Hart or Rahul
    Mehta?") and stays a candidate."""
    tag, i1, i2, j1, _ = op
    return (tag in ("insert", "delete") and i1 == j1 == 0 and i2 < len(left)
            and left[i2].key in asked)


def _widened(op: Op) -> Op:
    """An insertion or deletion grown by one shared token, the one before it when there is
    one (the word it adds to: ``Paris`` in ``Paris, France``), else the next one, so that
    neither side's span is empty."""
    tag, i1, i2, j1, j2 = op
    if i1 > 0 and j1 > 0:
        return tag, i1 - 1, i2, j1 - 1, j2
    return tag, i1, i2 + 1, j1, j2 + 1


def _by_clause(op: Op, shown: tuple[str, str], left: Sequence[Token],
               right: Sequence[Token]) -> list[Op]:
    """A replaced stretch read clause by clause within each side's first sentence ("The
    documents state the answer: Lucas (see Passage 0)"): each clause of one side against each
    of the other's. Later sentences are remarks on the answer ("It was restored in 2001."),
    not competing readings of it."""
    _, i1, i2, j1, j2 = op
    mine, theirs = _clauses(shown[0], left, i1, i2), _clauses(shown[1], right, j1, j2)
    if mine == [(i1, i2)] and theirs == [(j1, j2)]:
        return []
    return [("replace", a, b, c, d) for a, b in mine for c, d in theirs]


def _clauses(shown: str, tokens: Sequence[Token], i1: int, i2: int) -> list[tuple[int, int]]:
    """The clauses of the first sentence of ``tokens[i1:i2]``."""
    end = next((k for k in range(i1 + 1, i2)
                if _between(shown, tokens[k - 1], tokens[k]) & _SENTENCE_END), i2)
    cuts = [k for k in range(i1 + 1, end) if _ends_clause(shown, tokens[k - 1], tokens[k])]
    return list(pairwise([i1, *cuts, end]))


def _less_shared_word(op: Op, left: Sequence[Token], right: Sequence[Token]) -> list[Op]:
    """A replaced stretch less a first or last token that the other text also says elsewhere
    (``Bolivia is`` against ``The passages say that`` where the other text reads ``... the
    answer is Chile``): a word of the framing the alignment matched elsewhere. A token the
    other text never says is kept: ``Lionel Messi`` is never cut to ``Messi``."""
    _, i1, i2, j1, j2 = op
    left_keys, right_keys = {t.key for t in left}, {t.key for t in right}
    out: list[Op] = []
    if i2 - i1 > 1:
        if left[i1].key in right_keys:
            out.append(("replace", i1 + 1, i2, j1, j2))
        if left[i2 - 1].key in right_keys:
            out.append(("replace", i1, i2 - 1, j1, j2))
    if j2 - j1 > 1:
        if right[j1].key in left_keys:
            out.append(("replace", i1, i2, j1 + 1, j2))
        if right[j2 - 1].key in left_keys:
            out.append(("replace", i1, i2, j1, j2 - 1))
    return out


def _less_connective(op: Op, shown: tuple[str, str], left: Sequence[Token],
                     right: Sequence[Token]) -> list[Op]:
    """A replaced stretch less its first token on the side whose part continues its clause,
    where the other side's part begins a clause of its own (``is German`` in "The answer is
    German." against ``Sweden`` in "Answer: Sweden"): the other text's punctuation stands where
    this one has a word linking the shared words to the answer."""
    _, i1, i2, j1, j2 = op
    out: list[Op] = []
    starts = [_starts_clause(shown[0], left[i1]), _starts_clause(shown[1], right[j1])]
    if i2 - i1 > 1 and starts[1] and not starts[0]:
        out.append(("replace", i1 + 1, i2, j1, j2))
    if j2 - j1 > 1 and starts[0] and not starts[1]:
        out.append(("replace", i1, i2, j1 + 1, j2))
    return out


def _starts_clause(shown: str, token: Token) -> bool:
    return clause_start(shown, token.plain_start) == token.plain_start


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
    return (Span(first.start, last.end), Span(first.plain_start, last.plain_end),
            clause_start(shown, first.plain_start))


def clause_start(text: str, position: int) -> int:
    """Where the clause that holds ``text[position]`` begins: after the last clause end
    before it and the spaces that follow (a compared part's scoring context starts there)."""
    clause = max((k + 1 for k in range(position) if text[k] in _CLAUSE_END), default=0)
    while clause < position and text[clause].isspace():
        clause += 1
    return clause


def _ends_clause(shown: str, before: Token, after: Token) -> bool:
    return bool(_between(shown, before, after) & _CLAUSE_END)


def _between(shown: str, before: Token, after: Token) -> set[str]:
    """The characters between two tokens of ``shown``."""
    return set(shown[before.plain_end:after.plain_start])


def _touch(before: Token, after: Token) -> bool:
    return before.plain_end == after.plain_start and not (is_ideograph(before.key[:1])
                                                          or is_ideograph(after.key[:1]))


def scored_text(text: str, spans: Sequence[Span]) -> str:
    """The compared words of ``text`` as one string (the audit record's short form)."""
    return " … ".join(text[s.start:s.end] for s in spans)
