"""Answer cleaning (model output -> short answer) and answer normalization (for equality/EM)."""

from __future__ import annotations

import re
import string

_ANSWER_PREFIX = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：]\s*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def clean_answer(raw: str) -> str:
    """Turn a raw generation into the short answer the paper's evaluation expects.

    Keeps the first non-empty line, removes any leading ``Answer:`` label (repeated or with
    ``The answer is:``), surrounding quotes and whitespace, and one trailing period.
    """
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    first = next((line for line in text.split("\n") if line.strip()), "")
    answer = first.strip()
    previous = None
    while previous != answer:
        previous = answer
        answer = _ANSWER_PREFIX.sub("", answer).strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "\"'`":
        answer = answer[1:-1].strip()
    # One trailing period only: "U.S." keeps its inner dots, "Paris." becomes "Paris".
    if answer.endswith(".") and not answer.endswith(".."):
        answer = answer[:-1].rstrip()
    return answer


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
