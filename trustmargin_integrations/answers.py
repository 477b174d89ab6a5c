"""Answer cleaning (model output -> short answer) and answer normalization (for equality/EM).

Two cleaning policies, one per kind of text:

* :func:`clean_answer`, the paper's: a generation under the appendix prompts (a short phrase,
  cut at its first line) becomes the short answer that is scored and evaluated.
* :func:`scoring_form`, for text a user's chain produced (chat answers in full sentences,
  preambles, markdown): the short form that is *scored*, so that a shared preamble ("Sure! Here
  is what I know:") never makes two different answers look equal, and a long answer is scored
  on its answering sentence rather than on paragraphs of detail. The user's text itself is never
  changed: the Decision keeps it and returns it.

A short, single-phrase answer has the same form under both policies.
"""

from __future__ import annotations

import re
import string

from trustmargin_integrations.sentences import first_sentence

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


# Lead-in lines and clauses that chat models put before the answer. They carry no answer, and
# two candidates that share one would otherwise agree (or be scored) on the lead-in alone.
_INTERJECTION = r"(?:sure|certainly|of course|absolutely|okay|ok|yes|great question|good question)"
_PREAMBLE_CLAUSE = re.compile(
    rf"^\s*(?:{_INTERJECTION}\s*[!.,]+\s*)+"
    r"|^\s*(?:based on|according to|from|given|using)\s+(?:the\s+)?(?:provided\s+|given\s+|"
    r"above\s+|retrieved\s+)?(?:context|passages?|documents?|information|sources?|text|"
    r"evidence|search results)(?:\s+(?:provided|given|above|you shared))?\s*[,:]\s*"
    r"|^\s*here(?:\s+is|'s|’s)\s+(?:what i know|the answer|my answer|the short answer)"
    r"[^:\n]*[:.]\s*",
    re.IGNORECASE,
)
_BARE_INTERJECTION = re.compile(rf"^\s*{_INTERJECTION}\s*[!.,]*\s*$", re.IGNORECASE)
_MARKDOWN_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(\S(?:.*?\S)?)\1")
_MARKDOWN_LINE_MARK = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-*+•]\s+|\d{1,2}[.)]\s+)")
_LABEL_ONLY = re.compile(r"^\s*(?:(?:the\s+)?(?:short\s+|final\s+)?answer|response)\s*[:：]?\s*$",
                         re.IGNORECASE)
def _plain_line(line: str) -> str:
    """A line without markdown emphasis, heading, quote or list markers."""
    return _MARKDOWN_EMPHASIS.sub(r"\2", _MARKDOWN_LINE_MARK.sub("", line)).strip()


def _answering_line(lines: list[str]) -> str:
    """The first line that carries an answer: lead-in lines (ending in ':'), bare
    interjections and bare labels are skipped while a later line exists."""
    kept = [line for line in (_plain_line(raw) for raw in lines) if line]
    for i, line in enumerate(kept):
        skippable = (line.endswith((":", "：")) or _BARE_INTERJECTION.match(line)
                     or _LABEL_ONLY.match(line))
        if skippable and i < len(kept) - 1:
            continue
        return line
    return ""


def scoring_form(raw: str) -> str:
    """The short form of a user's candidate that is scored: its answering sentence.

    Skips chat lead-ins ("Sure! Here is what I know:", "Based on the context, ..."), markdown
    labels and markers ("**Answer:**", "### Answer", bullets), keeps the first sentence of the
    first line that carries an answer, and then applies :func:`clean_answer` (labels, quotes,
    one trailing period). A short single-phrase answer comes out as :func:`clean_answer` makes
    it. The caller keeps ``raw`` itself: this form is for scoring and audit only.
    """
    text = raw.replace("\r\n", "\n").replace("\r", "\n").strip()
    line = _answering_line(text.split("\n"))
    previous = None
    while previous != line:
        previous = line
        line = _ANSWER_PREFIX.sub("", _PREAMBLE_CLAUSE.sub("", line)).strip()
    return clean_answer(first_sentence(line)) if line else clean_answer(text)


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
