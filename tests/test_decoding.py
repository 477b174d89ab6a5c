"""The public token-level decoding API (prefill / step / greedy with a stop predicate) on the
real embedded SmolLM2, checked against transformers' own greedy ``generate``."""

from __future__ import annotations

import warnings

import pytest
import torch

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    TokenDecoder,
    cut_at_stop,
    stop_check_after,
)
from trustmargin_integrations.backends.hf import HFBackend

QUESTIONS = ("What is the capital of France?", "Who wrote the novel War and Peace?",
             "Name three primary colours.")


def prompts(backend: HFBackend) -> list[list[int]]:
    """Rendered prompts of different lengths (so the batch is left-padded)."""
    return [backend.encode_prompt(backend.render_prompt(f"Question:\n{q}\n\nAnswer:"))
            for q in QUESTIONS]


def transformers_greedy(backend: HFBackend, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding of one unpadded prompt, EOS dropped."""
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     num_beams=1, max_new_tokens=max_new_tokens,
                                     pad_token_id=backend.pad_token_id)
    return [t for t in out[0, len(prompt):].tolist() if t not in backend.eos_token_ids]


class Recorder:
    """A stop predicate that records every text it is asked about."""

    def __init__(self, holds: str, check_after: str | None = None) -> None:
        self.holds, self.seen = holds, []
        if check_after is not None:
            self.check_after = check_after

    def __call__(self, text: str) -> bool:
        self.seen.append(text)
        return self.holds in text


@pytest.mark.slow
def test_greedy_without_stop_equals_transformers_generate(backend: HFBackend) -> None:
    batch = prompts(backend)
    assert len({len(p) for p in batch}) > 1  # rows are padded differently
    output = backend.greedy(batch, 24)
    for prompt, tokens, text, stop in zip(batch, output.tokens, output.texts, output.stops,
                                          strict=True):
        theirs = transformers_greedy(backend, prompt, 24)
        assert tokens == theirs
        assert text == backend.tokenizer.decode(theirs, skip_special_tokens=True)
        assert stop == ("limit" if len(tokens) == 24 else "eos")
    # The text-level call is the same decoding.
    texts = [backend.render_prompt(f"Question:\n{q}\n\nAnswer:") for q in QUESTIONS]
    assert backend.generate(texts, 24) == output.texts


@pytest.mark.slow
def test_greedy_stops_right_after_the_token_where_the_predicate_holds(
        backend: HFBackend) -> None:
    batch = prompts(backend)
    full = backend.greedy(batch, 24)
    output = backend.greedy(batch, 24, stop=answer_complete)
    stopped = 0
    for whole, tokens, stop in zip(full.tokens, output.tokens, output.stops, strict=True):
        assert whole[:len(tokens)] == tokens  # the same greedy path, cut earlier
        holds = [answer_complete(backend.decode_tokens(whole[:n]))
                 for n in range(1, len(whole) + 1)]
        if stop == "stop":
            stopped += 1
            assert holds.index(True) == len(tokens) - 1  # the first token where it holds
        else:
            assert not any(holds[:len(tokens)]) and stop in ("eos", "limit")
    assert stopped >= 1, "the predicate never ended a generation: the test proves nothing"


def test_a_plain_predicate_is_checked_after_every_token(backend: HFBackend) -> None:
    [prompt] = prompts(backend)[:1]
    whole = backend.greedy([prompt], 12).tokens[0]
    target = backend.decode_tokens(whole[:3])[-2:]  # text that first appears at token 3
    recorder = Recorder(target)
    output = backend.greedy([prompt], 12, stop=recorder)
    assert output.stops == ["stop"] and output.tokens[0] == whole[:3]
    assert recorder.seen == [backend.decode_tokens(whole[:n]) for n in (1, 2, 3)]


@pytest.mark.slow
def test_check_after_limits_the_predicate_to_tokens_holding_those_characters(
        backend: HFBackend) -> None:
    batch = prompts(backend)
    recorder = Recorder("\n", check_after="\n\r")
    output = backend.greedy(batch, 24, stop=recorder)
    line_tokens = backend.decoding.tokens_holding("\n\r")
    assert recorder.seen and all("\n" in text or "\r" in text for text in recorder.seen)
    for tokens, stop in zip(output.tokens, output.stops, strict=True):
        if stop == "stop":
            assert tokens[-1] in line_tokens
    assert stop_check_after(answer_complete) == "\n\r"
    assert stop_check_after(recorder) == "\n\r" and stop_check_after(len) is None


@pytest.mark.slow
def test_token_probabilities_from_decoding_match_a_plain_forward_pass(
        backend: HFBackend) -> None:
    batch = prompts(backend)
    output = backend.greedy(batch, 10, probabilities=True)
    assert output.probabilities is not None
    for prompt, tokens, probs in zip(batch, output.tokens, output.probabilities, strict=True):
        assert len(probs) == len(tokens)
        assert probs == pytest.approx(backend.token_probabilities(prompt, tokens), abs=1e-4)
        # Greedy tokens are each step's most likely token.
        assert all(0.0 < p <= 1.0 for p in probs)


@pytest.mark.slow
def test_prefill_and_step_drive_the_same_greedy_path(backend: HFBackend) -> None:
    batch = prompts(backend)
    expected = backend.greedy(batch, 6).tokens
    state = backend.prefill(batch)
    made: list[list[int]] = [[] for _ in batch]
    for _ in range(6):
        assert state.logits is not None
        tokens = state.logits.argmax(-1).tolist()
        for row, token in enumerate(tokens):
            made[row].append(token)
        backend.step(state, tokens)
    for mine, greedy in zip(made, expected, strict=True):
        # A row that hit EOS keeps decoding here; up to that point the paths agree.
        assert mine[:len(greedy)] == greedy
    single = backend.greedy_tokens(batch[0], 6)
    assert [next(single) for _ in range(len(expected[0]))] == expected[0]


@pytest.mark.slow
def test_hf_backend_is_a_token_decoder_and_sessions_take_a_stop(backend: HFBackend) -> None:
    assert isinstance(backend, TokenDecoder)
    texts = [backend.render_prompt(f"Question:\n{q}\n\nAnswer:") for q in QUESTIONS]
    with backend.session() as session:
        generated = session.generate(texts, 24, stop=answer_complete)
        scores = session.score([ContinuationRequest(t, "Paris") for t in texts])
    assert generated == backend.generate(texts, 24, stop=answer_complete)
    plain = backend.score_continuations([ContinuationRequest(t, "Paris") for t in texts])
    assert [s.mean for s in scores] == pytest.approx([p.mean for p in plain], abs=1e-4)


@pytest.mark.slow
def test_decoding_prints_no_deprecated_cache_argument_warning(backend: HFBackend) -> None:
    texts = [backend.render_prompt(f"Question:\n{q}\n\nAnswer:") for q in QUESTIONS]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        with backend.session() as session:
            session.generate(texts, 3)
            session.score([ContinuationRequest(texts[0], "Paris")])


def test_cut_at_stop_ends_finished_text_where_the_predicate_first_holds() -> None:
    text = "Paris\nQuestion: and Rome?\nAnswer: Rome"
    assert cut_at_stop(text, None) == text
    assert cut_at_stop(text, answer_complete) == "Paris\n"
    assert cut_at_stop("Answer:\nParis", answer_complete) == "Answer:\nParis"
    assert cut_at_stop(text, lambda t: t.endswith("Rome")) == "Paris\nQuestion: and Rome"
    recorder = Recorder("Rome", check_after="\n")
    assert cut_at_stop(text, recorder) == "Paris\nQuestion: and Rome?\n"
    assert recorder.seen == ["Paris\n", "Paris\nQuestion: and Rome?\n"]


# An instruction of well over MIN_SHARED_PREFIX tokens before each question: the prompts then
# differ, at different lengths, so the rows' own tokens are padded.
SHARED_HEAD = ("Read the question below and answer it with a short phrase or a single word, "
               "copied from what you know.\n\nQuestion:\n")


def _long_prefix_prompts(backend: HFBackend) -> list[list[int]]:
    """The questions after :data:`SHARED_HEAD`, rendered and tokenized."""
    return [backend.encode_prompt(backend.render_prompt(SHARED_HEAD + q)) for q in QUESTIONS]


def test_a_shared_prefix_is_run_once_and_gives_the_plain_prefill(backend: HFBackend) -> None:
    from trustmargin_integrations.backends.hf.decoding import (
        MIN_SHARED_PREFIX,
        shared_prefix_length,
    )

    batch = _long_prefix_prompts(backend)
    shared = shared_prefix_length(batch)
    assert shared >= MIN_SHARED_PREFIX
    fed: list[tuple[int, ...]] = []
    hook = backend.model.register_forward_pre_hook(
        lambda _m, _a, kw: fed.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        mine = backend.prefill(batch)
        # Asking for hidden states takes the plain path: every row run whole.
        plain = backend.prefill(batch, hidden_states=True)
    finally:
        hook.remove()
    width = max(len(p) for p in batch)
    assert fed == [(1, shared), (len(batch), width - shared), (len(batch), width)]
    assert (mine.pads, mine.width) == (plain.pads, plain.width)
    assert torch.equal(mine.mask, plain.mask)
    assert torch.equal(mine.next_positions, plain.next_positions)
    assert mine.logits is not None and plain.logits is not None
    assert torch.allclose(mine.logits, plain.logits, atol=1e-4)
    seen = plain.mask.bool()[:, None, :, None]
    for ours, theirs in zip(mine.cache.layers, plain.cache.layers, strict=True):
        assert ours.keys.shape == theirs.keys.shape
        # Padding columns hold different junk on the two paths; every real column agrees.
        assert torch.allclose(ours.keys * seen, theirs.keys * seen, atol=1e-4)
        assert torch.allclose(ours.values * seen, theirs.values * seen, atol=1e-4)


@pytest.mark.slow
def test_generation_and_scoring_after_a_shared_prefix_match_the_plain_paths(
        backend: HFBackend) -> None:
    batch = _long_prefix_prompts(backend)
    output = backend.greedy(batch, 16)
    for prompt, tokens in zip(batch, output.tokens, strict=True):
        assert tokens == transformers_greedy(backend, prompt, 16)[:len(tokens)]
    # Scoring branches off the generation's cache, laid out as a plain prefill's.
    texts = [backend.render_prompt(SHARED_HEAD + q) for q in QUESTIONS]
    requests = [ContinuationRequest(t, a) for t in texts for a in ("Paris", "Leo Tolstoy")]
    with backend.session() as session:
        session.generate(texts, 4)
        scores = session.score(requests)
    plain = backend.score_continuations(requests)
    assert [s.mean for s in scores] == pytest.approx([p.mean for p in plain], abs=1e-4)
