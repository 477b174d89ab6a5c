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
    lines = [[format_passage(i, p) for i, p in enumerate(ps)] for ps in passage_lists]
    flat = many([line for own in lines for line in own])
    newline = count_tokens("\n") if flat else 0
    estimates, start = [], 0
    for own, budget in zip(lines, budgets, strict=True):
        estimates.append(_estimate(flat[start:start + len(own)], newline, budget))
        start += len(own)
    joined = [i for i, (n, _) in enumerate(estimates) if n]
    exact_counts = dict(zip(joined, many(["\n".join(lines[i][:estimates[i][0]])
                                          for i in joined]), strict=True))
    built = []
    for i, (passages, budget) in enumerate(zip(passage_lists, budgets, strict=True)):
        n, estimated = estimates[i]
        exact = {0: 0, n: exact_counts[i]} if n else {0: 0}
        used, tokens = _settle(lines[i], budget, n, estimated, exact, count_tokens)
        built.append(_built(passages, used, tokens, budget, count_tokens, truncate_tokens))
    return built


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
