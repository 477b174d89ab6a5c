"""The paper's answer handling: cleaning a generation into its short answer
(:func:`clean_answer`), and the SQuAD-style normalization that grades answers and is the
paper's agreement test for its own short answers (:func:`answers_agree`). Text a user's chain
produced is never cut or normalized here: it is read by :mod:`.reading`.
"""

from __future__ import annotations

import re
import string

_ANSWER_PREFIX = re.compile(
    r"^\s*(?:(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：]|the\s+(?:final\s+)?answer\s+is\s)"
    r"\s*",
    re.IGNORECASE,
)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


_ABBREVIATION_END = re.compile(r"(?:\b\w\.){2,}$")


def _drop_trailing_period(answer: str) -> str:
    # One trailing period only: "Paris." becomes "Paris", while "U.S." and "..." stay.
    if answer.endswith(".") and not answer.endswith("..") and not _ABBREVIATION_END.search(answer):
        return answer[:-1].rstrip()
    return answer


def clean_answer(raw: str) -> str:
    """Turn a raw generation into the short answer the paper's evaluation expects.

    Keeps the first non-empty line, removes any leading ``Answer:`` label (repeated or with
    ``The answer is:``), surrounding quotes and whitespace, and one trailing period.
    """
    text = raw.replace("\r\n", "\n").replace("\r", "\n").strip()
    # A label may stand on its own line ("Answer:\nParis"), so drop it before picking a line.
    previous = None
    while previous != text:
        previous = text
        text = _ANSWER_PREFIX.sub("", text).strip()
    first = next((line for line in text.split("\n") if line.strip()), "")
    answer = first.strip()
    previous = None
    while previous != answer:
        previous = answer
        answer = _ANSWER_PREFIX.sub("", answer).strip()
    answer = _drop_trailing_period(answer)
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'`":
        answer = _drop_trailing_period(answer[1:-1].strip())
    return answer


def answer_complete(raw: str) -> bool:
    """True once a generation's first answer line has ended, so greedy decoding may stop early.

    Whatever follows that newline cannot change :func:`clean_answer`'s result.
    """
    text = raw.replace("\r", "\n").lstrip()
    previous = None
    while previous != text:
        previous = text
        text = _ANSWER_PREFIX.sub("", text).lstrip()
    return "\n" in text.rstrip(" \t") and bool(text.split("\n", 1)[0].strip())


# Only a token holding a line break can complete the first answer line, so a token-level
# decoder tests this stop predicate only after such tokens (backends.base.StopPredicate).
answer_complete.check_after = "\n\r"  # type: ignore[attr-defined]


def normalize_answer(text: str) -> str:
    """SQuAD-style normalization: lowercase, drop punctuation and articles, squeeze spaces."""
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def answers_agree(first: str, second: str) -> bool:
    """True when both answers are non-blank and equal after :func:`normalize_answer`."""
    left, right = normalize_answer(first), normalize_answer(second)
    return bool(left) and left == right
