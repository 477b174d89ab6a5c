"""Where a sentence ends: the one splitter for generated reasoning (IRCoT keeps the first
sentence of each step; FLARE stops a look-ahead at a sentence end).

A hand-written rule rather than a tokenizer library: the splitters we could install (NLTK's
punkt, spaCy's sentencizer) need model downloads or ship their own abbreviation data, and the
cases that matter here are few and tested.
"""

from __future__ import annotations

import re

# Words whose trailing period does not end a sentence ("St. Louis", "Dr. Who", "Jan. 5").
_ABBREVIATIONS = frozenset({
    "mr", "mrs", "ms", "dr", "prof", "st", "mt", "jr", "sr", "gen", "col", "lt", "sgt", "capt",
    "rev", "hon", "ft", "no", "vs", "etc", "inc", "ltd", "co", "corp",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
})
_END = re.compile(r"[.!?]")
_WORD_BEFORE = re.compile(r"[\s(\"'“\[]")
_OPENERS = "\"'“‘([*_"


def ends_sentence(text: str) -> bool:
    """True when ``text`` ends with sentence-final punctuation that is no abbreviation.

    A period after a known abbreviation, a single capital ("J. R. R. Tolkien") or a dotted
    initialism ("U.S.", "p.m.", "e.g.") does not end a sentence.
    """
    if not text or text[-1] not in ".!?" or not text.strip(".!? \t\n"):
        return False
    if text[-1] != ".":
        return True
    word = _WORD_BEFORE.split(text[:-1])[-1]
    if word.lower() in _ABBREVIATIONS:
        return False
    if word[-1:].isupper() and (len(word) == 1 or word[-2] == "."):
        return False
    return not ("." in word and word.replace(".", "").isalpha())


def first_sentence(text: str) -> str:
    """The first sentence of the first non-blank line of ``text``, stripped (the whole line
    when no sentence ends inside it).

    A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace and what can start a
    sentence (a capital, a digit, an opening quote or bracket, a letter of a script without
    case; "It was 3 p.m. yes" and "born 1176? – died 1216" are one sentence), unless the
    period closes an abbreviation (:func:`ends_sentence`).
    """
    line = next((ln for ln in text.replace("\r", "\n").split("\n") if ln.strip()), "").strip()
    for match in _END.finditer(line):
        end = match.end()
        if end < len(line) and not line[end].isspace():
            continue
        if end < len(line) and not _starts_a_sentence(line[end:].lstrip()):
            continue
        if ends_sentence(line[:end]):
            return line[:end].strip()
    return line


def _starts_a_sentence(text: str) -> bool:
    head = text[:1]
    return bool(head) and (head in _OPENERS or head.isdigit()
                           or (head.isalpha() and not head.islower()))
