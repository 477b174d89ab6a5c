"""The reading of a text: what a person reads in it, as a list of tokens located in the text.

One lossless reading serves every comparison of two given texts (alignment, agreement, and
whether a short answer is stated in a text). It drops only what a reader does not see or does
not read differently:

* the Unicode normalization form (NFC; not NFKC, which would turn ``2³`` into ``23``), invisible
  format characters (zero-width joiner and space, soft hyphen, direction marks, variation
  selectors), full-width Latin forms, the minus sign's code point, whitespace;
* markdown marks (emphasis, heading, quote and bullet markers, code backticks and a code
  fence's language tag);
* letter case outside code (in code ``A`` and ``a`` are different names);
* digit grouping inside a number (``1,250``, ``1 250`` and ``1250`` read alike);
* sentence punctuation at a word's edge (``Paris.``, ``(Paris)``, ``“Paris”`` read as
  ``Paris``).

Everything else is kept: signs and minus signs, operators (``!=``, ``<``, ``+``), currency,
``%``, ``‰``, degree, superscripts, emoji and check marks, punctuation inside a token
(``bob@example.com``, ``f(x)``) and every digit. Two texts agree iff their readings are equal
(:func:`same_reading`). Grading normalizations (SQuAD-style, :mod:`.answers`) grade; they never
decide.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

# Ideographic scripts write words without spaces: each character is a token there.
_IDEOGRAPH = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# A word: letters, digits and marks; an apostrophe between letters ("don't") and a point or
# comma between digits ("3.14", "1,5") stay inside it. A sign directly before a digit, where
# no word or closing bracket precedes it, belongs to the number ("-5", "x = -5", "(+3)").
_TOKEN = re.compile(
    rf"(?P<ideograph>[{_IDEOGRAPH}])"
    rf"|(?P<word>(?:(?<![\w)\]])[-+](?=\d))?[^\W{_IDEOGRAPH}]+"
    rf"(?:(?:'(?=[^\W\d_])|(?<=\d)[.,](?=\d))[^\W{_IDEOGRAPH}]+)*)"
    rf"|(?P<symbols>[^\w\s{_IDEOGRAPH}]+)")
# Sentence punctuation: dropped where it stands at a token's edge (before a space or the end:
# closers; after a space or the start: openers), kept inside a run such as "!=" or "C++".
_CLOSERS = frozenset(".,;:!?…\"')]}»›。、，！？：；」』）〕】")
_OPENERS = frozenset("\"'([{«‹¿¡「『（〔【")
# Characters read as another: the minus sign and hyphens as "-", typographic quotes as ASCII.
_SAME_AS = str.maketrans({"\u2212": "-", "\u2010": "-", "\u2011": "-", "\u2018": "'",
                          "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u3000": " "})
# Digit grouping: groups of three after one separator used consistently ("1,250,000",
# "1 250", "1'250", "1_250"), not part of a longer number.
_GROUPED = re.compile(r"(?<![\d.,])\d{1,3}(?P<sep>[, '_])\d{3}(?:(?P=sep)\d{3})*(?![\d]|[.,]\d)")
_FENCE = re.compile(r"^[ \t]{0,3}(?:`{3,}|~{3,})[^\n]*$", re.MULTILINE)
_LINE_MARK = re.compile(r"^[ \t]*(?:(?:#{1,6}|>|[-*+•])[ \t]+|>)+", re.MULTILINE)
_RULE_LINE = re.compile(r"^[ \t]*(?:[-*_][ \t]*){3,}$", re.MULTILINE)
_EMPHASIS = re.compile(r"(?<![\w*_~\\])(\*\*|__|\*|_)(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*_])")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_IDEOGRAPH_CHAR = re.compile(rf"[{_IDEOGRAPH}]")


@dataclass(frozen=True)
class Token:
    """One token of a reading: its ``key`` (what is compared), where it stands in the text
    (``text[start:end]``) and in the text's :func:`plain` form (``plain_start``,
    ``plain_end``)."""

    key: str
    start: int
    end: int
    plain_start: int
    plain_end: int


@dataclass
class _Cell:
    """One visible character of a text after normalization, and the characters of the
    original text it stands for."""

    char: str
    start: int
    end: int
    code: bool = False
    kept: bool = True


def _invisible(char: str) -> bool:
    """A character a reader does not see: format characters (zero-width, soft hyphen,
    direction marks) and variation selectors."""
    code = ord(char)
    return (unicodedata.category(char) == "Cf" or 0xFE00 <= code <= 0xFE0F
            or 0xE0100 <= code <= 0xE01EF)


def _cells(text: str) -> list[_Cell]:
    """The visible characters of ``text`` in NFC, each mapped to the original's span."""
    visible = [(i, c) for i, c in enumerate(text) if not _invisible(c)]
    cells: list[_Cell] = []
    k = 0
    while k < len(visible):
        # A base character and the combining marks after it compose together.
        j = k + 1
        while j < len(visible) and unicodedata.combining(visible[j][1]):
            j += 1
        start, end = visible[k][0], visible[j - 1][0] + 1
        for char in unicodedata.normalize("NFC", "".join(c for _, c in visible[k:j])):
            if 0xFF01 <= ord(char) <= 0xFF5E:  # full-width Latin reads as Latin
                char = chr(ord(char) - 0xFEE0)
            char = char.translate(_SAME_AS)
            if char.isspace() and char != "\n":
                char = " "
            cells.append(_Cell(char, start, end))
        k = j
    return cells


def _drop(cells: list[_Cell], start: int, end: int) -> None:
    for cell in cells[start:end]:
        cell.kept = False


def _mark_markdown(cells: list[_Cell]) -> None:
    """Mark code (kept as written) and drop markdown marks outside it."""
    text = "".join(c.char for c in cells)
    in_fence = False
    fence_lines = list(_FENCE.finditer(text))
    last = 0
    for match in fence_lines:
        if in_fence:
            for cell in cells[last:match.start()]:
                cell.code = True
        _drop(cells, match.start(), match.end())
        in_fence, last = not in_fence, match.end()
    if in_fence:  # an unclosed fence runs to the end
        for cell in cells[last:]:
            cell.code = True
    for match in _INLINE_CODE.finditer(text):
        if any(c.code for c in cells[match.start():match.end()]):
            continue
        _drop(cells, match.start(1), match.end(1))
        _drop(cells, match.end(2), match.end())
        for cell in cells[match.start(2):match.end(2)]:
            cell.code = True
    prose = "".join(c.char if not c.code and c.kept else "\0" for c in cells)
    for pattern in (_RULE_LINE, _LINE_MARK):
        for match in pattern.finditer(prose):
            _drop(cells, match.start(), match.end())
    while True:  # nested emphasis ("***x***", "**_x_**") comes off layer by layer
        prose = "".join(c.char if not c.code and c.kept else "\0" for c in cells)
        found = [m for m in _EMPHASIS.finditer(prose) if "\0" not in m.group(0)]
        if not found:
            break
        for match in found:
            _drop(cells, match.start(1), match.end(1))
            _drop(cells, match.end(2), match.end())


def _ungroup_digits(cells: list[_Cell]) -> None:
    """Drop the separators of grouped digits outside code."""
    text = "".join(c.char if c.kept and not c.code else "\0" for c in cells)
    for match in _GROUPED.finditer(text):
        for k in range(match.start(), match.end()):
            if not text[k].isdigit():
                cells[k].kept = False


def read(text: str) -> tuple[Token, ...]:
    """The reading of ``text``: its tokens in order, each with its key and its place."""
    return _reading(text)[0]


def plain(text: str) -> str:
    """``text`` as a reader sees it: NFC, without invisible characters, markdown marks or digit
    grouping, with typographic variants in their plain form; case, punctuation and line breaks
    kept. What is scored of a chain's text, so that nothing a reader does not see moves a
    likelihood."""
    return _reading(text)[1]


@functools.lru_cache(maxsize=4096)
def _reading(text: str) -> tuple[tuple[Token, ...], str]:
    # Cached: a pair's texts are read for alignment, agreement and scoring alike.
    cells = _cells(text)
    _mark_markdown(cells)
    _ungroup_digits(cells)
    kept = [c for c in cells if c.kept]
    visible = "".join(c.char for c in kept)
    tokens: list[Token] = []
    for match in _TOKEN.finditer(visible):
        start, end = match.span()
        code = kept[start].code
        if match.lastgroup == "symbols" and not code:
            start, end = _trim_sentence_punctuation(visible, start, end)
            if start == end:
                continue
        key = visible[start:end]
        tokens.append(Token(key if code else key.casefold(), kept[start].start,
                            kept[end - 1].end, start, end))
    return tuple(tokens), visible


def _trim_sentence_punctuation(text: str, start: int, end: int) -> tuple[int, int]:
    """A run of symbols without the sentence punctuation at its outer edges."""
    if end == len(text) or _separates(text[end]):
        while end > start and text[end - 1] in _CLOSERS:
            end -= 1
    if start == 0 or _separates(text[start - 1]):
        while start < end and text[start] in _OPENERS:
            start += 1
    return start, end


def _separates(char: str) -> bool:
    """A space, or a character of a script written without spaces (its punctuation stands
    between words with no space around it)."""
    return char.isspace() or is_ideograph(char)


def is_ideograph(char: str) -> bool:
    """True for a character of a script written without spaces: a token of its own."""
    return bool(_IDEOGRAPH_CHAR.fullmatch(char))


def keys(text: str) -> tuple[str, ...]:
    """The keys of :func:`read` alone: what two texts are compared by."""
    return tuple(t.key for t in read(text))


def same_reading(first: str, second: str) -> bool:
    """True when two texts read alike and say something: the only agreement of given texts."""
    left = keys(first)
    return bool(left) and left == keys(second)


def stated_in(short: str, text: str) -> bool:
    """True when the tokens of ``short`` occur, in order and together, in ``text``'s reading."""
    needle, hay = keys(short), keys(text)
    return bool(needle) and any(hay[i:i + len(needle)] == needle
                                for i in range(len(hay) - len(needle) + 1))
