"""The static-cache decode loop (backends/hf/static_cache.py) gives the plain loop's greedy
tokens, stops and token probabilities, and leaves the prompts' cache for scoring, on the real
embedded SmolLM2 over real ComplexWebQuestions prompts (CPU: the same step as on CUDA, run
without a CUDA graph)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.hf import GreedyOutput, HFBackend
from trustmargin_integrations.errors import InvalidInputError

pytestmark = pytest.mark.slow

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "raw"
TOL = 1e-4


def cwq(n: int) -> list[dict]:
    """The first ``n`` ComplexWebQuestions, each with its first one or two retrieved passages
    cut to a few sentences (contexts of different lengths, short enough for a busy CPU)."""
    records = json.loads((DATA / "prag" / "complexwebquestions_total.json").read_text())
    return [{"id": str(i), "question": r["question"],
             "passages": [p[:300] for p in r["passages"][:1 + i % 2]]}
            for i, r in enumerate(records[:n])]


def loop(backend: HFBackend, static: bool, check_every: int | None = None) -> Any:
    """Generation on the static loop or the plain one for the duration (the session-wide
    backend is restored afterwards)."""
    return mock.patch.multiple(backend.decoding, static_decode=static,
                               static_check_every=check_every)


def plain_prompts(backend: HFBackend, n: int) -> list[list[int]]:
    """Completion-style prompts of ``n`` real questions, every other one after a passage
    (lengths differ, so the batch is left-padded); the model answers over several lines, so
    ``answer_complete`` fires at different steps per row."""
    return [backend.encode_prompt(
        (f"Passage: {item['passages'][0]}\n" if i % 2 else "")
        + f"Question: {item['question']}\nAnswer:") for i, item in enumerate(cwq(n))]


def chat_prompts(tm: TrustMargin, n: int) -> list[list[int]]:
    """The arbiter's Direct (question-only) prompts of ``n`` real questions: chat answers
    that end with EOS."""
    return [tm.backend.encode_prompt(tm.prepare(item).views.question_only) for item in cwq(n)]


def both_loops(backend: HFBackend, batch: list[list[int]], max_new_tokens: int,
               **kwargs: object) -> tuple[GreedyOutput, GreedyOutput]:
    with loop(backend, static=False):
        plain = backend.greedy(batch, max_new_tokens, probabilities=True, **kwargs)
        assert backend.decoding.last_decode_loop == ("dynamic" if max_new_tokens > 1 else "none")
    with loop(backend, static=True):
        static = backend.greedy(batch, max_new_tokens, probabilities=True, **kwargs)
        assert backend.decoding.last_decode_loop == ("static" if max_new_tokens > 1 else "none")
    return plain, static


def assert_same(plain: GreedyOutput, static: GreedyOutput) -> None:
    assert static.tokens == plain.tokens
    assert static.texts == plain.texts
    assert static.stops == plain.stops
    assert plain.probabilities is not None and static.probabilities is not None
    for ours, theirs in zip(static.probabilities, plain.probabilities, strict=True):
        assert ours == pytest.approx(theirs, abs=TOL)


def test_static_loop_stops_where_the_plain_loop_does(backend: HFBackend) -> None:
    batch = plain_prompts(backend, 4)
    assert len({len(p) for p in batch}) == len(batch)  # every row padded differently
    plain, static = both_loops(backend, batch, 24, stop=answer_complete)
    assert_same(plain, static)
    stopped = [len(t) for t, why in zip(plain.tokens, plain.stops, strict=True) if why == "stop"]
    assert len(set(stopped)) > 1, "the stop should fire at different steps per row"


def test_static_loop_ends_rows_at_eos_like_the_plain_loop(tm: TrustMargin,
                                                          backend: HFBackend) -> None:
    plain, static = both_loops(backend, chat_prompts(tm, 4), 14)
    assert_same(plain, static)
    assert "eos" in plain.stops and "limit" in plain.stops


def test_reading_tokens_every_few_steps_changes_nothing(backend: HFBackend) -> None:
    # How the CUDA loop reads its tokens (every few steps, decoding past a row's end).
    batch = plain_prompts(backend, 3)
    with loop(backend, static=False):
        plain = backend.greedy(batch, 24, stop=answer_complete, probabilities=True)
    with loop(backend, static=True, check_every=5):
        chunked = backend.greedy(batch, 24, stop=answer_complete, probabilities=True)
    assert_same(plain, chunked)


def test_sessions_score_on_the_prompts_cache_after_static_decoding(tm: TrustMargin,
                                                                   backend: HFBackend) -> None:
    # Generation, then the six likelihoods branched off the cached prompts in the session.
    inputs = cwq(2)
    with loop(backend, static=False):
        plain = tm.arbitrate_batch(inputs)
    with loop(backend, static=True):
        static = tm.arbitrate_batch(inputs)
        assert backend.decoding.last_decode_loop == "static"
    scored = 0
    for ours, theirs in zip(static, plain, strict=True):
        assert (ours.direct_answer, ours.rag_answer, ours.source) == (
            theirs.direct_answer, theirs.rag_answer, theirs.source)
        for cand in ("direct", "rag"):
            mine, ref = getattr(ours, f"{cand}_likelihoods"), getattr(theirs, f"{cand}_likelihoods")
            if ref is None:
                continue
            scored += 1
            for view in ("question_only", "question_context", "context_only"):
                assert getattr(mine, view) == pytest.approx(getattr(ref, view), abs=TOL)
    assert scored >= 2


def test_static_loop_with_eager_attention_uses_an_additive_mask(backend: HFBackend) -> None:
    config = backend.model.config
    before = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        plain, static = both_loops(backend, plain_prompts(backend, 2), 12, stop=answer_complete)
    finally:
        config._attn_implementation = before
    assert_same(plain, static)


def test_static_decode_is_off_on_cpu_unless_asked(backend: HFBackend) -> None:
    assert backend.device.type == "cpu" and not backend.decoding.static_decode
    asked = HFBackend(backend.model, backend.tokenizer, "smollm2-135m", static_decode=True)
    assert asked.decoding.static_decode


def test_static_decode_refuses_a_sliding_window_model(backend: HFBackend) -> None:
    from transformers import AutoModelForCausalLM, MistralConfig

    config = MistralConfig(vocab_size=len(backend.tokenizer), hidden_size=64,
                           intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, sliding_window=32)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    assert not HFBackend(model, backend.tokenizer, "tiny-mistral").decoding.static_decode
    with pytest.raises(InvalidInputError) as error:
        HFBackend(model, backend.tokenizer, "tiny-mistral", static_decode=True)
    assert error.value.field == "static_decode" and "sliding-window" in str(error.value)


def test_batches_of_one_and_single_token_limits(backend: HFBackend) -> None:
    batch = plain_prompts(backend, 2)[1:]
    for max_new_tokens in (1, 2, 9):
        plain, static = both_loops(backend, batch, max_new_tokens)
        assert_same(plain, static)
    # The prompts' cache is what scoring branches off: exactly the prompt, nothing decoded.
    assert static.batch.cache.get_seq_length() == len(batch[0])

