"""Token-level decoding on a local causal LM: the public prefill / step / greedy API.

:class:`TokenDecoding` drives the model token by token for the backend's generation and for
the pipelines that read the model while decoding (FLARE, CLeHe): ``prefill`` (a left-padded
batch, optionally with every layer's hidden states), ``step``, ``greedy_steps`` /
``greedy_tokens``, ``greedy`` (with a stop predicate) and ``token_probabilities``.
:func:`prefill` is also a plain function of a :class:`~.loaded.LoadedModel`. Every model
call takes the loaded model's lock.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import torch

from trustmargin_integrations.backends.base import StopPredicate, stop_check_after
from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.static_cache import (
    CUDA_CHECK_EVERY,
    StaticDecoder,
    Step,
    static_decode_unsupported,
)
from trustmargin_integrations.errors import BackendError


def _forward(loaded: LoadedModel, ids: torch.Tensor, mask: torch.Tensor,
             positions: torch.Tensor, cache: Any, hidden_states: bool,
             logits_to_keep: int = 0) -> Any:
    with loaded.lock:
        return loaded.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                            use_cache=True, output_hidden_states=hidden_states,
                            logits_to_keep=logits_to_keep, **{loaded.cache_kwarg: cache})


# Prompts share a prefix worth computing once (an instruction placed before what varies, as in
# the extraction prompt) when it is at least this many tokens; below it the copies of the
# prefix's keys and values cost about what recomputing it does.
MIN_SHARED_PREFIX = 16


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt shares, leaving each at least one of its own (the
    last prompt token's logits are each row's first prediction)."""
    return min(min(common_prefix_length(prompts[0], p), len(p) - 1) for p in prompts)


@torch.inference_mode()
def prefill(loaded: LoadedModel, prompts: Sequence[Sequence[int]], *,
            hidden_states: bool = False) -> DecodingBatch:
    """Run a left-padded batch of prompts (token ids) into a fresh KV cache.

    When the prompts share a prefix of at least :data:`MIN_SHARED_PREFIX` tokens it is run
    once (:func:`_prefill_shared`); the batch is the same either way (to float rounding).
    """
    from transformers import DynamicCache

    if not prompts or any(not p for p in prompts):
        raise BackendError("a prompt tokenized to nothing; prompts must be non-empty")
    shared = shared_prefix_length(prompts) if not hidden_states else 0
    if shared >= MIN_SHARED_PREFIX and len(prompts) > 1 and shares_prefixes(loaded):
        return _prefill_shared(loaded, prompts, shared)
    width = max(len(p) for p in prompts)
    pads = [width - len(p) for p in prompts]
    ids = torch.tensor([[loaded.pad_token_id] * pad + list(p)
                        for pad, p in zip(pads, prompts, strict=True)], device=loaded.device)
    mask = torch.tensor([[0] * pad + [1] * len(p) for pad, p in zip(pads, prompts,
                                                                       strict=True)],
                        device=loaded.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = _forward(loaded, ids, mask, positions, cache, hidden_states, logits_to_keep=1)
    return DecodingBatch(cache, pads, width, mask, positions[:, -1:] + 1, out.logits[:, -1],
                         out.hidden_states if hidden_states else None)


def shares_prefixes(loaded: LoadedModel) -> bool:
    """True when a prefix's keys and values may be computed once and copied into every row:
    a model of full-attention layers only, whose cache layers this code knows (the same
    condition as the static decode loop's)."""
    return static_decode_unsupported(loaded.model) is None


def _prefill_shared(loaded: LoadedModel, prompts: Sequence[Sequence[int]],
                    shared: int) -> DecodingBatch:
    """:func:`prefill` of prompts whose first ``shared`` tokens are equal: the prefix runs
    once, its keys and values are repeated for every row, each row's own tokens run after it
    (left-padded among themselves), and each row's padding is then moved in front of its
    prefix, so the batch is laid out exactly as a plain left-padded prefill's."""
    from transformers import DynamicCache

    device, rows = loaded.device, len(prompts)
    cache = DynamicCache()
    prefix = torch.tensor([list(prompts[0][:shared])], device=device)
    _forward(loaded, prefix, torch.ones_like(prefix), torch.arange(shared, device=device)[None],
             cache, False, logits_to_keep=1)
    cache.batch_repeat_interleave(rows)
    tails = [list(p[shared:]) for p in prompts]
    tail_width = max(len(t) for t in tails)
    pads = [tail_width - len(t) for t in tails]
    padded = list(zip(pads, tails, strict=True))
    ids = torch.tensor([[loaded.pad_token_id] * pad + t for pad, t in padded], device=device)
    tail_mask = torch.tensor([[0] * pad + [1] * len(t) for pad, t in padded], device=device)
    positions = shared + (tail_mask.cumsum(-1) - 1).clamp(min=0)
    out = _forward(loaded, ids, torch.cat([torch.ones((rows, shared), dtype=tail_mask.dtype,
                                                      device=device), tail_mask], dim=1),
                   positions, cache, False, logits_to_keep=1)
    # Row r's columns are [prefix | its pads | its tokens]; [pads | prefix | tokens] is the
    # plain layout (the keys carry their positions already, so columns may move freely).
    width = shared + tail_width
    order = torch.tensor([[*range(shared, shared + pad), *range(shared),
                           *range(shared + pad, width)] for pad in pads], device=device)
    layer: Any  # full-attention layers only (shares_prefixes): keys and values are tensors
    for layer in cache.layers:
        index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
        layer.keys = layer.keys.gather(2, index)
        layer.values = layer.values.gather(2, index)
    mask = torch.tensor([[0] * pad + [1] * (width - pad) for pad in pads], device=device)
    return DecodingBatch(cache, pads, width, mask, positions[:, -1:] + 1, out.logits[:, -1])


@dataclass
class GreedyOutput:
    """What :meth:`TokenDecoding.greedy` decoded for each prompt.

    ``stops`` says why each row ended: ``"eos"``, ``"stop"`` (the stop predicate held after
    its last token) or ``"limit"`` (``max_new_tokens``). ``probabilities`` holds the
    probability of each generated token under the decoding step's distribution, when asked
    for. ``batch`` is the prompts' cache (cropped back to the prompts).
    """

    batch: DecodingBatch
    tokens: list[list[int]]
    texts: list[str]
    stops: list[str]
    probabilities: list[list[float]] | None = field(default=None)


class _GreedyTally:
    """Per-row bookkeeping of greedy decoding, fed one step (every row's token) at a time:
    a row ends at EOS (not kept), or after the token at which ``stop`` first holds."""

    def __init__(self, decoding: TokenDecoding, stop: StopPredicate | None, rows: int,
                 probabilities: bool) -> None:
        self.decoding = decoding
        self.stop = stop
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.probs: list[list[float]] = [[] for _ in range(rows)]
        self.stops = ["limit"] * rows
        self.done = [False] * rows
        self.probabilities = probabilities

    @property
    def finished(self) -> bool:
        """True once every row has ended."""
        return all(self.done)

    def add(self, step_tokens: list[int], step_probs: list[float] | None) -> None:
        """Record one step's token of every row that has not ended."""
        for row, token in enumerate(step_tokens):
            if self.done[row]:
                continue
            if token in self.decoding.loaded.eos_token_ids:
                self.done[row], self.stops[row] = True, "eos"
                continue
            self.tokens[row].append(token)
            if self.probabilities and step_probs is not None:
                self.probs[row].append(step_probs[row])
            if self.decoding.stop_holds(self.stop, self.tokens[row]):
                self.done[row], self.stops[row] = True, "stop"


class TokenDecoding:
    """The decoding API on a :class:`~.loaded.LoadedModel` (what
    :class:`~trustmargin_integrations.backends.hf.HFBackend` hands its decoding calls to).

    Args:
        loaded: the model to decode with.
        static_decode: run :meth:`greedy`'s steps on a static KV cache (:mod:`.static_cache`).
        cuda_graphs: capture the static step as a CUDA graph when the device is CUDA.

    ``static_check_every`` is the number of static steps decoded between two reads of their
    tokens by the host (None: a few on CUDA, every step elsewhere; any value gives the same
    result), and ``last_decode_loop`` names the loop the last :meth:`greedy` call ran.
    """

    def __init__(self, loaded: LoadedModel, *, static_decode: bool = False,
                 cuda_graphs: bool = True) -> None:
        self.loaded = loaded
        self.static_decode = static_decode
        self.cuda_graphs = cuda_graphs
        self.static_check_every: int | None = None
        self.last_decode_loop = "none"
        self._tokens_holding: dict[str, frozenset[int]] = {}

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens removed."""
        return self.loaded.decode_tokens(ids)

    def tokens_holding(self, chars: str) -> frozenset[int]:
        """Ids of the tokens whose text holds any of ``chars`` (computed once per ``chars``:
        one batch decode of the vocabulary, about 0.3 s for 50k tokens)."""
        if chars not in self._tokens_holding:
            tokenizer = self.loaded.tokenizer
            texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
            self._tokens_holding[chars] = frozenset(
                i for i, text in enumerate(texts) if any(c in text for c in chars))
        return self._tokens_holding[chars]

    def stop_holds(self, stop: StopPredicate | None, ids: Sequence[int]) -> bool:
        """True when ``stop`` holds for the generated ``ids`` (their last token newest).

        A predicate with ``check_after`` is only tested after a token that holds one of
        those characters, so the text is decoded at a few steps instead of at every one.
        """
        if stop is None or not ids:
            return False
        chars = stop_check_after(stop)
        if chars is not None and ids[-1] not in self.tokens_holding(chars):
            return False
        return bool(stop(self.decode_tokens(ids)))

    def prefill(self, prompts: Sequence[Sequence[int]], *,
                hidden_states: bool = False) -> DecodingBatch:
        """Run a left-padded batch of prompts (token ids) into a fresh KV cache."""
        return prefill(self.loaded, prompts, hidden_states=hidden_states)

    @torch.inference_mode()
    def step(self, batch: DecodingBatch, tokens: Sequence[int] | torch.Tensor, *,
             hidden_states: bool = False) -> None:
        """Feed one token per row; ``batch.logits`` then predict the token after it."""
        fed = torch.as_tensor(tokens, device=self.loaded.device).reshape(batch.rows, 1)
        batch.mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)
        out = _forward(self.loaded, fed, batch.mask, batch.next_positions, batch.cache,
                       hidden_states)
        batch.next_positions = batch.next_positions + 1
        batch.logits = out.logits[:, -1]
        batch.hidden_states = out.hidden_states if hidden_states else None

    @torch.inference_mode()
    def greedy_steps(self, batch: DecodingBatch, max_new_tokens: int) -> Iterator[torch.Tensor]:
        """Each step's greedy token of every row (a tensor of ``batch.rows`` ids), fed back
        before the next step. Stop iterating to stop: a yielded step is fed only when the
        caller asks for the next one, so nothing is computed past the last token used."""
        for n in range(max_new_tokens):
            assert batch.logits is not None, "a cropped batch has no next-token logits"
            tokens = batch.logits.argmax(-1)
            yield tokens
            if n < max_new_tokens - 1:
                self.step(batch, tokens)

    def greedy_tokens(self, prompt: Sequence[int], max_new_tokens: int) -> Iterator[int]:
        """The greedy continuation of one prompt, token by token (EOS included: the caller
        decides what ends it)."""
        for tokens in self.greedy_steps(self.prefill([prompt]), max_new_tokens):
            yield int(tokens[0])

    @torch.inference_mode()
    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
               stop: StopPredicate | None = None,
               probabilities: bool = False) -> GreedyOutput:
        """Greedy decoding of a left-padded batch: each row ends at EOS (not kept), after
        ``max_new_tokens`` or once ``stop`` holds for its text; the cache is then cropped
        back to the prompts, ready for scoring.

        The steps after the prefill run on a static KV cache (a CUDA graph replay per token
        on CUDA, :mod:`.static_cache`) when ``static_decode`` is on, else on the prefill's
        growing cache; both give the same tokens. ``last_decode_loop`` names the loop used.
        """
        batch = self.prefill(prompts)
        tally = _GreedyTally(self, stop, len(prompts), probabilities)
        assert batch.logits is not None
        first = batch.logits.argmax(-1)
        tally.add(first.tolist(),
                  _picked_probabilities(batch.logits, first) if probabilities else None)
        self.last_decode_loop = "none"
        if max_new_tokens > 1 and not tally.finished:
            self.last_decode_loop = "static" if self.static_decode else "dynamic"
            later = (self._static_chunks(batch, first, max_new_tokens - 1, probabilities)
                     if self.static_decode else
                     self._dynamic_chunks(batch, first, max_new_tokens - 1, probabilities))
            with closing(later):
                for chunk in later:
                    for step_tokens, step_probs in chunk:
                        tally.add(step_tokens, step_probs)
                    if tally.finished:
                        break
        batch.crop_to_prompts()
        return GreedyOutput(batch, tally.tokens,
                            [self.decode_tokens(ids) for ids in tally.tokens], tally.stops,
                            tally.probs if probabilities else None)

    def _dynamic_chunks(self, batch: DecodingBatch, first: torch.Tensor, steps: int,
                        probabilities: bool) -> Generator[list[Step], None, None]:
        """The steps on the prefill's growing cache, one at a time (the reference loop)."""
        tokens = first
        for _ in range(steps):
            self.step(batch, tokens)
            assert batch.logits is not None  # a step leaves the next-token logits
            tokens = batch.logits.argmax(-1)
            yield [(tokens.tolist(),
                    _picked_probabilities(batch.logits, tokens) if probabilities else None)]

    def _static_chunks(self, batch: DecodingBatch, first: torch.Tensor, steps: int,
                       probabilities: bool) -> Generator[list[Step], None, None]:
        """The steps on a static cache; the host reads them every few steps on CUDA (where
        the GPU runs ahead) and at every step elsewhere (where a step is synchronous)."""
        decoder = StaticDecoder(self.loaded, batch, first, steps, probabilities=probabilities,
                                capture=self.cuda_graphs)
        check_every = self.static_check_every or (
            CUDA_CHECK_EVERY if self.loaded.device.type == "cuda" else 1)
        chunks = decoder.chunks(check_every)
        with closing(chunks):
            for chunk in chunks:
                if decoder.captured:
                    self.last_decode_loop = "static+cuda-graph"
                yield chunk

    @torch.inference_mode()
    def token_probabilities(self, prefix: Sequence[int],
                            continuation: Sequence[int]) -> list[float]:
        """Probability of each ``continuation`` token after ``prefix`` (one plain forward pass
        over both, no cache)."""
        if not continuation:
            return []
        loaded = self.loaded
        ids = torch.tensor([list(prefix) + list(continuation)], device=loaded.device)
        with loaded.lock:
            # The last len(continuation) + 1 positions; the final one predicts past the end.
            logits = loaded.model(input_ids=ids, logits_to_keep=len(continuation) + 1).logits
        probs = torch.softmax(logits[0, :-1].float(), dim=-1)
        picked = probs.gather(1, torch.tensor(list(continuation), device=loaded.device)[:, None])
        return [float(p) for p in picked[:, 0]]


def _picked_probabilities(logits: torch.Tensor | None, tokens: torch.Tensor) -> list[float]:
    assert logits is not None
    probs = torch.softmax(logits.float(), dim=-1)
    return probs.gather(1, tokens[:, None])[:, 0].tolist()
