"""``DecodingBatch``: a left-padded batch of prompts being decoded, with its KV cache (what
the decoding loops advance and the fast scoring pass branches off)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


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
