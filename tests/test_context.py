"""The one model-window rule (:func:`context.context_room`): its arithmetic, that the arbiter
and the pipelines' shared prompt builder meet the window at the same edge, and that inputs
longer than the window fail fast or are cut, with linear work."""

from __future__ import annotations

import time
from typing import Any

import pytest
from reliability_support import WindowGuard, time_limit
from score_support import GOOD, PASSAGE

from trustmargin_integrations import (
    BM25Index,
    InvalidInputError,
    TrustMargin,
    TrustMarginConfig,
)
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.context import (
    MIN_CONTEXT_TOKENS,
    SEPARATOR_SLACK_TOKENS,
    BuiltContext,
    build_context,
    context_room,
    tokens_before_context,
)
from trustmargin_integrations.demo import demo_corpus
from trustmargin_integrations.pipelines import build_pipeline
from trustmargin_integrations.pipelines.base import context_text
from trustmargin_integrations.prompts import view_texts

QUESTION = "Who designed the Zelvora Bridge?"
LONG_PASSAGE = "The Zelvora Bridge spans the river and was designed by many hands. " * 20


def test_context_room_keeps_the_separator_slack_and_the_minimum() -> None:
    assert tokens_before_context(50, 20) == 50 + 20 + SEPARATOR_SLACK_TOKENS
    assert context_room(200, 50, 20) == 200 - 50 - 20 - SEPARATOR_SLACK_TOKENS
    edge = tokens_before_context(50, 20) + MIN_CONTEXT_TOKENS
    assert context_room(edge, 50, 20) == MIN_CONTEXT_TOKENS
    assert context_room(edge - 1, 50, 20) is None


class NarrowWindow:
    """The real embedded backend, every call delegated to it, with a smaller window (so the
    window edge is reached by a short question instead of thousands of tokens on CPU)."""

    def __init__(self, inner: HFBackend, window: int) -> None:
        self.inner = inner
        self.context_window = window

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _edge(backend: HFBackend, answer_tokens: int) -> int:
    """The smallest window in which QUESTION's question+context prompt still has a context."""
    fixed = backend.render_prompt(view_texts(QUESTION, "").question_context)
    return tokens_before_context(backend.count_tokens(fixed), answer_tokens) + MIN_CONTEXT_TOKENS


def test_arbiter_caps_at_the_edge_and_refuses_one_token_below(backend: HFBackend) -> None:
    tm = TrustMargin(NarrowWindow(backend, _edge(backend, 20)))  # type: ignore[arg-type]
    prepared = tm.prepare({"question": QUESTION, "passages": [LONG_PASSAGE]})
    assert f"passages: context budget capped at {MIN_CONTEXT_TOKENS} tokens" in " ".join(
        prepared.warnings)
    assert prepared.context.truncated and prepared.context.num_tokens <= MIN_CONTEXT_TOKENS
    narrower = TrustMargin(NarrowWindow(backend, _edge(backend, 20) - 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError) as err:
        narrower.prepare({"question": QUESTION, "passages": [LONG_PASSAGE]})
    assert err.value.field == "question"


def test_pipeline_prompt_meets_the_same_edge_as_the_arbiter(backend: HFBackend) -> None:
    index = BM25Index.build(demo_corpus())
    at_edge = NarrowWindow(backend, _edge(backend, 20))
    dtr = build_pipeline("dtr", at_edge, index, max_new_tokens=20)  # type: ignore[arg-type]
    passages = index.search(QUESTION, 3)
    prompt, used = dtr._prompt_over_fitting(QUESTION, passages, 20)
    assert len(used) == 1 and used[0].text != passages[0].text  # the first one, cut
    assert prompt == backend.render_prompt(view_texts(QUESTION, context_text(used))
                                           .question_context)
    assert backend.count_tokens(prompt) + 20 <= at_edge.context_window
    below = build_pipeline("dtr", NarrowWindow(backend, _edge(backend, 20) - 1),  # type: ignore[arg-type]
                           index, max_new_tokens=20)
    with pytest.raises(InvalidInputError, match="too long for the model's"):
        below._prompt_over_fitting(QUESTION, passages, 20)


def _reference(passages: list[str], budget: int, backend: HFBackend) -> BuiltContext:
    """The same context with no head cut: every passage counted whole (what the builder did
    before, at about 130 bytes of memory per character)."""
    import trustmargin_integrations.context as context

    saved = context.HEAD_CHARS_PER_TOKEN
    context.HEAD_CHARS_PER_TOKEN = 10**9
    try:
        return build_context(passages, backend.count_tokens, budget, backend.truncate_tokens)
    finally:
        context.HEAD_CHARS_PER_TOKEN = saved


@pytest.mark.parametrize("shape", ["prose", "one long word", "runs of spaces", "digits"])
def test_a_huge_passage_is_counted_by_its_head_and_the_context_is_unchanged(
    backend: HFBackend, shape: str
) -> None:
    """Only a budget's worth of a huge passage is ever tokenized, and the
    context is the one that counting the whole passage gives (also for text of many
    characters per token, where the head must grow)."""
    unit = {"prose": "The Zelvora Bridge was designed by Marta Okonkwo in 1962. ",
            "one long word": "zelvora", "runs of spaces": "x" + " " * 300,
            "digits": "0123456789"}[shape]
    huge = unit * (200_000 // len(unit))  # about 200 KB
    seen: list[int] = []

    def counting(text: str) -> int:
        seen.append(len(text))
        return backend.count_tokens(text)

    for passages in ([huge, "Second passage."], ["A short first passage.", huge]):
        built = build_context(passages, counting, 120, backend.truncate_tokens)
        assert max(seen) < 50_000, f"a text of {max(seen):,} characters was tokenized"
        assert built == _reference(passages, 120, backend)
        seen.clear()


def test_the_arbiter_keeps_a_huge_passage_within_a_budget(tm: TrustMargin) -> None:
    """End to end: 2 MB of passage text prepares at the size of its budget, not its own."""
    huge = "The Zelvora Bridge was designed by Marta Okonkwo in 1962. " * 35_000
    prepared = tm.prepare({"question": QUESTION, "passages": [huge]})
    assert prepared.context.truncated
    assert prepared.context.num_tokens <= tm.config.max_context_tokens
    assert prepared.context.text.count("Zelvora") < 200


# -- inputs longer than the window --------------------------------------------------------


def test_an_overlong_question_fails_fast(tm: TrustMargin) -> None:
    began = time.monotonic()
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate("Why? " * 20_000, [PASSAGE], "a", "b")
    assert err.value.field == "question" and "8192-token window" in str(err.value)
    with pytest.raises(InvalidInputError) as batch:
        tm.arbitrate_batch([GOOD, {**GOOD, "question": "x" * 100_000}])
    assert batch.value.field == "inputs[1].question"
    assert time.monotonic() - began < 15  # seconds, not minutes of compute


def test_an_overlong_candidate_fails_fast(backend: Any) -> None:
    """A given candidate is scored after each of the three prompts: one longer than the
    window cannot be scored. It must be refused (naming it) or cut with a warning, fast."""
    guarded = TrustMargin(WindowGuard(backend))
    long_answer = "Marta Okonkwo and " + "the engineers of the bridge " * 2_000
    began = time.monotonic()
    with time_limit(60):
        try:
            decision = guarded.arbitrate(QUESTION, [PASSAGE], "Gustave Eiffel", long_answer)
        except InvalidInputError as exc:
            assert exc.field == "rag_answer", exc
        else:
            assert any(w.startswith("rag_answer") for w in decision.warnings), decision
    assert time.monotonic() - began < 30


def test_a_context_budget_beyond_the_window_is_refused_or_capped(backend: Any) -> None:
    with pytest.raises(InvalidInputError, match="max_context_tokens"):
        TrustMarginConfig(max_context_tokens=10**9)
    wide = TrustMargin(backend, TrustMarginConfig(max_context_tokens=10_000_000))
    passages = [f"Passage {i}: the Zelvora Bridge has {i} rivets on span {i}." for i in range(900)]
    prepared = wide.prepare({"question": QUESTION, "passages": passages})
    assert any("8192-token window" in w for w in prepared.warnings)
    rendered = max(backend.count_tokens(v) for v in (prepared.views.question_context,
                                                      prepared.views.context_only))
    assert rendered + wide.config.max_new_tokens <= backend.context_window
    assert 0 < prepared.context.passages_used < len(passages)


class _CountingTokenizer:
    """The real backend, counting the characters it is asked to tokenize."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.chars = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def count_tokens(self, text: str) -> int:
        self.chars += len(text)
        return self.inner.count_tokens(text)


def test_the_context_builder_is_linear(backend: Any) -> None:
    """600 passages are cut to the window tokenizing each passage a bounded number of times
    (a quadratic builder re-tokenizes every prefix)."""
    passages = [f"Passage text {i}: the bridge over the river was repaired in {1900 + i}."
                for i in range(600)]
    budget = 10_000_000  # capped to the window: the builder must stop at the window
    counting = _CountingTokenizer(backend)
    arbiter = TrustMargin(counting, TrustMarginConfig(max_context_tokens=budget))
    arbiter.prepare({"question": QUESTION, "passages": passages[:5]})  # warm the tokenizer
    counting.chars = 0
    prepared = arbiter.prepare({"question": QUESTION, "passages": passages})
    used = prepared.context.passages_used
    assert 100 < used < 600
    # The work, not the clock (timings live in benchmarks/contexts.py): a bounded number of
    # characters tokenized per passage kept.
    assert counting.chars <= 8 * sum(len(p) for p in passages[:used + 1]) + 20_000
