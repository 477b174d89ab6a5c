"""Passages -> a context inside a token budget, and the one model-window rule.

:func:`build_contexts` joins as many leading passages as fit a question's budget (the
arbiter and every pipeline use it); :func:`context_room` says how much of a model's window is
left for the context once the fixed prompt and the answer are counted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trustmargin_integrations.prompts import format_passage, join_passages

# The fixed prompt is counted with an empty context and the context on its own; put together,
# the passage lines add a few separator tokens that neither count shows (a token can form
# across the seam between template and context): this many are kept free for them.
SEPARATOR_SLACK_TOKENS = 8
# A context smaller than this holds no useful evidence: a question whose prompts leave less
# room is too long for the model, not a question to answer from a sliver of a passage.
MIN_CONTEXT_TOKENS = 16
# Tokenizing a passage costs about 130 bytes of memory per character (a 50 MB passage took
# 6.6 GB and two minutes) even when only a budget's worth of its tokens can be kept. So a
# passage longer than (budget + HEAD_SLACK_TOKENS) * HEAD_CHARS_PER_TOKEN characters is
# counted by its head only. Natural text has about 4 characters per token; a head that still
# holds fewer than budget + HEAD_SLACK_TOKENS tokens is grown until it does (or is the whole
# passage), so the cut never changes a result: tokenization is local, and the slack keeps
# the tokens that the cut can disturb past the budget's end.
HEAD_CHARS_PER_TOKEN = 12
HEAD_SLACK_TOKENS = 64


def tokens_before_context(fixed_prompt_tokens: int, answer_tokens: int) -> int:
    """The window a prompt takes before any passage: the rendered prompt with an empty
    context, the answer that will be generated or scored after it, and the separator slack."""
    return fixed_prompt_tokens + answer_tokens + SEPARATOR_SLACK_TOKENS


def context_room(window: int, fixed_prompt_tokens: int, answer_tokens: int) -> int | None:
    """The most context tokens that fit a model's ``window`` next to a prompt of
    ``fixed_prompt_tokens`` (rendered with an empty context) and ``answer_tokens``; None when
    fewer than :data:`MIN_CONTEXT_TOKENS` would be left (the question is too long)."""
    room = window - tokens_before_context(fixed_prompt_tokens, answer_tokens)
    return room if room >= MIN_CONTEXT_TOKENS else None


@dataclass(frozen=True)
class BuiltContext:
    """A passage context cut to the token budget.

    ``truncated`` is True when a passage had to be cut mid-text because even the first
    passage alone exceeded the budget; otherwise whole passages are dropped from the end.
    """

    text: str
    passages_used: int
    passages_given: int
    num_tokens: int
    truncated: bool


def build_context(
    passages: Sequence[str],
    count_tokens: Callable[[str], int],
    max_tokens: int,
    truncate_tokens: Callable[[str, int], str] | None = None,
    count_many: Callable[[Sequence[str]], list[int]] | None = None,
) -> BuiltContext:
    """Join as many leading passages as fit in ``max_tokens`` (a passage boundary cut).

    When not even the first passage fits, it is cut to the budget with ``truncate_tokens``
    (token-level) so the question still sees some evidence; the result says so.
    ``count_many`` (optional) counts many texts in one tokenizer call.
    """
    return build_contexts([passages], [max_tokens], count_tokens, truncate_tokens,
                          count_many)[0]


def build_contexts(
    passage_lists: Sequence[Sequence[str]],
    budgets: Sequence[int],
    count_tokens: Callable[[str], int],
    truncate_tokens: Callable[[str, int], str] | None = None,
    count_many: Callable[[Sequence[str]], list[int]] | None = None,
) -> list[BuiltContext]:
    """:func:`build_context` for many questions, each with its own budget, in input order.

    Tokenizing is most of the cost of preparing a question, and one tokenizer call per text
    leaves all but one core idle (a fast tokenizer encodes a batch in parallel). So the
    passage lines of every question are counted in one call and the joined text of every
    question's estimate in a second; only a question whose line joins merge or split a token
    is then settled one count at a time, as the single-question builder always did.
    """
    if len(passage_lists) != len(budgets):
        raise ValueError("one budget per passage list is needed")
    many = count_many or (lambda texts: [count_tokens(t) for t in texts])
    heads = [[_head(p, budget, HEAD_CHARS_PER_TOKEN) for p in ps]
             for ps, budget in zip(passage_lists, budgets, strict=True)]
    lines = [[format_passage(i, p) for i, p in enumerate(ps)] for ps in heads]
    flat = many([line for own in lines for line in own])
    _grow_short_heads(passage_lists, budgets, heads, lines, flat, count_tokens)
    newline = count_tokens("\n") if flat else 0
    estimates, start = [], 0
    for own, budget in zip(lines, budgets, strict=True):
        estimates.append(_estimate(flat[start:start + len(own)], newline, budget))
        start += len(own)
    joined = [i for i, (n, _) in enumerate(estimates) if n]
    exact_counts = dict(zip(joined, many(["\n".join(lines[i][:estimates[i][0]])
                                          for i in joined]), strict=True))
    built = []
    for i, (passages, budget) in enumerate(zip(heads, budgets, strict=True)):
        n, estimated = estimates[i]
        exact = {0: 0, n: exact_counts[i]} if n else {0: 0}
        used, tokens = _settle(lines[i], budget, n, estimated, exact, count_tokens)
        built.append(_built(passages, used, tokens, budget, count_tokens, truncate_tokens))
    return built


def _head(passage: str, budget: int, chars_per_token: int) -> str:
    """The passage, or its head when it is far longer than ``budget`` tokens can hold."""
    limit = (max(budget, 0) + HEAD_SLACK_TOKENS) * chars_per_token
    return passage if len(passage) <= limit else passage[:limit]


def _grow_short_heads(passage_lists: Sequence[Sequence[str]], budgets: Sequence[int],
                      heads: list[list[str]], lines: list[list[str]], flat: list[int],
                      count_tokens: Callable[[str], int]) -> None:
    """Make every cut head hold more than its budget (+ slack) tokens, in place.

    A head with fewer tokens than that (text of many characters per token, such as runs of
    spaces) is not known to be over budget: it grows fourfold until it is, or is whole.
    """
    at = 0
    for passages, budget, own_heads, own_lines in zip(passage_lists, budgets, heads, lines,
                                                      strict=True):
        for i, passage in enumerate(passages):
            chars = HEAD_CHARS_PER_TOKEN
            while (len(own_heads[i]) < len(passage)
                   and flat[at + i] <= max(budget, 0) + HEAD_SLACK_TOKENS):
                chars *= 4
                own_heads[i] = _head(passage, budget, chars)
                own_lines[i] = format_passage(i, own_heads[i])
                flat[at + i] = count_tokens(own_lines[i])
        at += len(passages)


def _built(passages: Sequence[str], used: int, tokens: int, max_tokens: int,
           count_tokens: Callable[[str], int],
           truncate_tokens: Callable[[str, int], str] | None) -> BuiltContext:
    """The context of the first ``used`` passages, or the first one cut when none fits."""
    if used or not passages:
        return BuiltContext(join_passages(passages[:used]), used, len(passages), tokens, False)
    if truncate_tokens is None:
        raise ValueError("the first passage exceeds the context budget and no truncator was given")
    prefix_tokens = count_tokens(format_passage(0, ""))
    head = truncate_tokens(passages[0], max(1, max_tokens - prefix_tokens))
    text = join_passages([head])
    return BuiltContext(text, 1, len(passages), count_tokens(text), True)


def _estimate(sizes: Sequence[int], newline: int, max_tokens: int) -> tuple[int, int]:
    """How many leading lines fit by their separate counts, and the estimated size.

    Tokenizing every prefix would be quadratic in the number of passages, so the per-line
    counts give an estimate and exact counts of the joined text settle it (:func:`_settle`).
    """
    running, estimate, estimated = 0, 0, 0
    for i, size in enumerate(sizes):
        running += size + (newline if i else 0)
        if running > max_tokens:
            break
        estimate, estimated = i + 1, running
    return estimate, estimated


def _settle(lines: Sequence[str], max_tokens: int, estimate: int, estimated: int,
            exact: dict[int, int], count_tokens: Callable[[str], int]) -> tuple[int, int]:
    """The largest n whose first-n context has at most ``max_tokens`` tokens, and its size.

    A join can merge or split a token at a line boundary, so the estimate alone is not exact.
    When the exact count of the estimate equals the estimate, the boundaries merged nothing
    and one more line, already estimated over budget, is not tried. ``exact`` holds the
    counts already known (n -> tokens of the first n lines joined) and gains the new ones.
    """

    def size_of(n: int) -> int:
        if n not in exact:
            exact[n] = count_tokens("\n".join(lines[:n]))
        return exact[n]

    n = estimate
    while n > 0 and size_of(n) > max_tokens:
        n -= 1
    if n == estimate and size_of(n) == estimated:
        return n, exact[n]
    while n < len(lines) and size_of(n + 1) <= max_tokens:
        n += 1
    return n, size_of(n)
