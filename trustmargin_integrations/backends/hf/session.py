"""``HFSession``: one batch's generation and scoring, with the generation caches kept so the
scoring branches off them (:mod:`trustmargin_integrations.backends.hf.tree`)."""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    StopPredicate,
)
from trustmargin_integrations.backends.hf.decoding import TokenDecoding
from trustmargin_integrations.backends.hf.reference import score_plain
from trustmargin_integrations.backends.hf.tree import CachedPrompts, score_requests


class HFSession:
    """One batch's generation and scoring on the model ``decoding`` decodes with.

    ``generate`` keeps each batch's KV cache (cropped to the prompts); ``score`` branches
    every request off the cached prompt it shares the longest prefix with. With ``fast``
    off, both calls are the plain reference path.
    """

    def __init__(self, decoding: TokenDecoding, *, fast: bool) -> None:
        self.decoding = decoding
        self.fast = fast
        self._caches: list[CachedPrompts] = []
        self._encoded: dict[str, list[int]] = {}

    def __enter__(self) -> HFSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self._caches.clear()
        self._encoded.clear()

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations (see :meth:`HFBackend.generate`); the prompts' cache stays
        for :meth:`score`."""
        encoded = [self.decoding.loaded.encode_prompt(p) for p in prompts]
        output = self.decoding.greedy(encoded, max_new_tokens, stop=stop)
        if self.fast:
            self._caches.append(CachedPrompts(output.batch, encoded))
            self._encoded.update(zip(prompts, encoded, strict=True))
        return output.texts

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        """Teacher-forced log-likelihoods, branching off this session's caches."""
        loaded = self.decoding.loaded
        with loaded.lock:
            if not self.fast:
                return score_plain(loaded, requests)
            return score_requests(loaded, requests, self._caches, self._encoded)
