"""``LoadedModel``: the loaded causal LM and what every part of the local backend reads off it.

Decoding (:mod:`.decoding`), the static-cache loop (:mod:`.static_cache`), the fast scoring
pass (:mod:`.tree`), the reference scoring (:mod:`.reference`) and the session
(:mod:`.session`) each receive this one record explicitly, instead of reading attributes
that a mixin expects some other class to have set.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def cache_argument(model: Any) -> str:
    """The name under which ``model.forward`` takes a KV cache: ``cache`` in transformers
    releases that renamed it (passing the old name prints a FutureWarning on every call),
    ``past_key_values`` before (and in remote-code models that kept it)."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The tokenizer's EOS and every EOS of the model's generation config."""
    eos = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return frozenset(e for e in eos if e is not None)


# eq=False: two loads of the same weights are two models (each with its own lock), and a
# model is not hashable field by field.
@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A loaded causal LM (in eval mode) with its tokenizer and the facts read off them.

    Attributes:
        model: the ``PreTrainedModel``.
        tokenizer: its tokenizer.
        device: where the model's parameters are.
        lock: serializes the model's forward passes (LCEL runs parallel branches in threads;
            async adapters score in worker threads), held around every model call.
        eos_token_ids: every id that ends a generated answer.
        pad_token_id: the id left padding is made of.
        cache_kwarg: the name under which ``model.forward`` takes a KV cache.
        chat: prompts are wrapped in the tokenizer's chat template (which supplies their
            special tokens).
    """

    model: Any
    tokenizer: Any
    device: torch.device
    lock: threading.RLock
    eos_token_ids: frozenset[int]
    pad_token_id: int
    cache_kwarg: str
    chat: bool

    @classmethod
    def of(cls, model: Any, tokenizer: Any) -> LoadedModel:
        """The record of ``model`` (switched to eval mode) and ``tokenizer``."""
        eos = eos_ids(model, tokenizer)
        pad = tokenizer.pad_token_id
        return cls(model=model.eval(), tokenizer=tokenizer,
                   device=next(model.parameters()).device, lock=threading.RLock(),
                   eos_token_ids=eos, pad_token_id=pad if pad is not None else min(eos, default=0),
                   cache_kwarg=cache_argument(model),
                   chat=bool(getattr(tokenizer, "chat_template", None)))

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids (special tokens come from the chat template when there is one)."""
        return list(self.tokenizer(prompt, add_special_tokens=not self.chat).input_ids)

    def encode_answer(self, answer: str) -> list[int]:
        """Token ids of a text on its own, without special tokens (as answers are scored;
        the same ids as :meth:`~..tokens.LocalTokenizerMixin.encode_answer`)."""
        return list(self.tokenizer(answer, add_special_tokens=False).input_ids)

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens removed."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))
