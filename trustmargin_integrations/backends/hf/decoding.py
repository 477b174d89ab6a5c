"""Token-level decoding on a local causal LM: the public prefill / step / greedy API.

One place drives the model token by token, for the backend's own generation and for the
pipelines that read the model while decoding (FLARE's token probabilities, CLeHe's ensemble
over passage rows and its intermediate layers):

* :meth:`TokenDecoding.prefill` runs a left-padded batch of prompts once (attention mask,
  position ids, a fresh KV cache) and keeps the next-token logits (and, on request, the
  hidden states of every layer);
* :meth:`TokenDecoding.step` feeds one token per row and moves the logits one step on;
* :meth:`TokenDecoding.greedy_steps` / :meth:`greedy_tokens` yield greedy tokens step by step
  (the caller decides when to stop), and :meth:`TokenDecoding.greedy` is the batched greedy
  loop with an injected stop predicate (token ids, texts, optional token probabilities);
* :meth:`TokenDecoding.token_probabilities` is the plain forward pass over prompt + tokens.

Every model call takes the backend's lock, so decoding from several threads is serialized
call by call.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trustmargin_integrations.backends.base import StopPredicate, stop_check_after
from trustmargin_integrations.errors import BackendError


def cache_argument(model: Any) -> str:
    """The name under which ``model.forward`` takes a KV cache: ``cache`` in transformers
    releases that renamed it (passing the old name prints a FutureWarning on every call),
    ``past_key_values`` before (and in remote-code models that kept it)."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


@dataclass
class DecodingBatch:
    """A left-padded batch of prompts being decoded, with its KV cache.

    ``logits`` are the next-token logits of every row (rows x vocabulary) and
    ``hidden_states`` the last call's per-layer hidden states when they were asked for;
    :meth:`crop_to_prompts` turns it back into a cache of exactly the prompts.
    """

    cache: Any
    pads: list[int]
    width: int
    mask: torch.Tensor
    next_positions: torch.Tensor
    logits: torch.Tensor | None
    hidden_states: tuple[torch.Tensor, ...] | None = None

    @property
    def rows(self) -> int:
        """Number of prompts in the batch."""
        return len(self.pads)

    def crop_to_prompts(self) -> None:
        """Drop every decoded token from the cache (the logits no longer apply)."""
        extra = self.cache.get_seq_length() - self.width
        if extra > 0:
            # A negative argument removes that many tokens in every transformers version.
            self.cache.crop(-extra)
        self.mask = self.mask[:, :self.width]
        self.next_positions = self.next_positions - max(extra, 0)
        self.logits = None
        self.hidden_states = None


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


class TokenDecoding:
    """The decoding API, mixed into :class:`~trustmargin_integrations.backends.hf.HFBackend`.

    Needs ``model``, ``tokenizer``, ``device``, ``lock`` (an RLock), ``eos_token_ids`` and
    ``pad_token_id`` on the instance.
    """

    model: Any
    tokenizer: Any
    device: torch.device
    lock: threading.RLock
    eos_token_ids: frozenset[int]
    pad_token_id: int
    cache_kwarg: str = "past_key_values"
    _tokens_holding: dict[str, frozenset[int]]

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens removed."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def tokens_holding(self, chars: str) -> frozenset[int]:
        """Ids of the tokens whose text holds any of ``chars`` (computed once per ``chars``:
        one batch decode of the vocabulary, about 0.3 s for 50k tokens)."""
        if not hasattr(self, "_tokens_holding"):
            self._tokens_holding = {}
        if chars not in self._tokens_holding:
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
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

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                 cache: Any, hidden_states: bool, logits_to_keep: int = 0) -> Any:
        with self.lock:
            return self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                              use_cache=True, output_hidden_states=hidden_states,
                              logits_to_keep=logits_to_keep, **{self.cache_kwarg: cache})

    @torch.inference_mode()
    def prefill(self, prompts: Sequence[Sequence[int]], *,
                hidden_states: bool = False) -> DecodingBatch:
        """Run a left-padded batch of prompts (token ids) into a fresh KV cache."""
        from transformers import DynamicCache

        if not prompts or any(not p for p in prompts):
            raise BackendError("a prompt tokenized to nothing; prompts must be non-empty")
        width = max(len(p) for p in prompts)
        pads = [width - len(p) for p in prompts]
        ids = torch.tensor([[self.pad_token_id] * pad + list(p)
                            for pad, p in zip(pads, prompts, strict=True)], device=self.device)
        mask = torch.tensor([[0] * pad + [1] * len(p) for pad, p in zip(pads, prompts,
                                                                           strict=True)],
                            device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self._forward(ids, mask, positions, cache, hidden_states, logits_to_keep=1)
        return DecodingBatch(cache, pads, width, mask, positions[:, -1:] + 1, out.logits[:, -1],
                             out.hidden_states if hidden_states else None)

    @torch.inference_mode()
    def step(self, batch: DecodingBatch, tokens: Sequence[int] | torch.Tensor, *,
             hidden_states: bool = False) -> None:
        """Feed one token per row; ``batch.logits`` then predict the token after it."""
        fed = torch.as_tensor(tokens, device=self.device).reshape(batch.rows, 1)
        batch.mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)
        out = self._forward(fed, batch.mask, batch.next_positions, batch.cache, hidden_states)
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
        back to the prompts, ready for scoring."""
        batch = self.prefill(prompts)
        tokens: list[list[int]] = [[] for _ in prompts]
        probs: list[list[float]] = [[] for _ in prompts]
        stops = ["limit"] * len(prompts)
        done = [False] * len(prompts)
        for step_tokens in self.greedy_steps(batch, max_new_tokens):
            chosen = step_tokens.tolist()
            if probabilities:
                step_probs = _picked_probabilities(batch.logits, step_tokens)
            for row, token in enumerate(chosen):
                if done[row]:
                    continue
                if token in self.eos_token_ids:
                    done[row], stops[row] = True, "eos"
                    continue
                tokens[row].append(token)
                if probabilities:
                    probs[row].append(step_probs[row])
                if self.stop_holds(stop, tokens[row]):
                    done[row], stops[row] = True, "stop"
            if all(done):
                break
        batch.crop_to_prompts()
        return GreedyOutput(batch, tokens, [self.decode_tokens(ids) for ids in tokens], stops,
                            probs if probabilities else None)

    @torch.inference_mode()
    def token_probabilities(self, prefix: Sequence[int],
                            continuation: Sequence[int]) -> list[float]:
        """Probability of each ``continuation`` token after ``prefix`` (one plain forward pass
        over both, no cache)."""
        if not continuation:
            return []
        ids = torch.tensor([list(prefix) + list(continuation)], device=self.device)
        with self.lock:
            # The last len(continuation) + 1 positions; the final one predicts past the end.
            logits = self.model(input_ids=ids, logits_to_keep=len(continuation) + 1).logits
        probs = torch.softmax(logits[0, :-1].float(), dim=-1)
        picked = probs.gather(1, torch.tensor(list(continuation), device=self.device)[:, None])
        return [float(p) for p in picked[:, 0]]


def _picked_probabilities(logits: torch.Tensor | None, tokens: torch.Tensor) -> list[float]:
    assert logits is not None
    probs = torch.softmax(logits.float(), dim=-1)
    return probs.gather(1, tokens[:, None])[:, 0].tolist()
