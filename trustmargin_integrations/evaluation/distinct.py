"""Distinct questions: what the domain check and the calibration count.

``trustmargin check`` and ``trustmargin calibrate`` count each distinct question once: later
copies are collapsed into the first (with a warning) before anything is split, fitted or
resampled. Two questions are the same when equal after :func:`question_key` (NFKC, case
folded, format characters removed, whitespace collapsed, punctuation at either end dropped).
Why: docs/decisions.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

_SPACES = re.compile(r"\s+")
# Shown in a warning: enough ids to find the copies, not a wall of text.
_SHOWN = 5


def question_key(text: str) -> str:
    """The form under which two question texts count as one question."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    visible = "".join(c for c in folded if unicodedata.category(c) != "Cf")
    return _strip_ends(_SPACES.sub(" ", visible))


def _strip_ends(text: str) -> str:
    """``text`` without punctuation or spaces at either end."""
    start, end = 0, len(text)
    while start < end and _is_edge(text[start]):
        start += 1
    while end > start and _is_edge(text[end - 1]):
        end -= 1
    return text[start:end]


def _is_edge(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


@dataclass(frozen=True)
class Distinct:
    """Which items of a list are distinct questions.

    Attributes:
        kept: positions of the first copy of each distinct question, in order.
        copies: position of every later copy -> position of the copy kept.
    """

    kept: list[int]
    copies: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, questions: Sequence[str]) -> Distinct:
        """The distinct questions among ``questions`` (texts, in order)."""
        first: dict[str, int] = {}
        kept: list[int] = []
        copies: dict[int, int] = {}
        for position, text in enumerate(questions):
            key = question_key(text)
            if key in first:
                copies[position] = first[key]
            else:
                first[key] = position
                kept.append(position)
        return cls(kept, copies)

    def warning(self, ids: Sequence[str]) -> str | None:
        """One line on what was collapsed (``ids``: every item's id, in order), or None."""
        if not self.copies:
            return None
        shown = ", ".join(f"{ids[copy]!r} = {ids[kept]!r}"
                          for copy, kept in list(self.copies.items())[:_SHOWN])
        more = f" and {len(self.copies) - _SHOWN} more" if len(self.copies) > _SHOWN else ""
        return (f"{len(self.copies)} of {len(self.kept) + len(self.copies)} labeled questions "
                f"repeat an earlier one (the same text ignoring case, spacing and end "
                f"punctuation; copy = first: {shown}{more}): each distinct question counts "
                f"once, as its first copy, leaving {len(self.kept)} questions")
