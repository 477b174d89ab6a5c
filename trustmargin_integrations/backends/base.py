"""The backend protocol: what TrustMargin needs from a language model, and nothing more.

A backend owns the model: it renders prompts with the model's chat template, counts tokens,
generates greedy continuations of prompts and scores continuations under prompts
(teacher-forced log-likelihoods). It knows nothing of the method: which prompts to generate,
which answers to score, how to clean them and how to decide is the arbiter's business
(:mod:`trustmargin_integrations.arbiter`).

The arbiter works on one batch of questions inside ``with backend.session() as s:``, calling
``s.generate`` for the missing candidates and then ``s.score`` for the likelihoods. A session
lets an engine keep state between those two calls: the transformers backend keeps the KV
caches of generation and branches the scoring off them. :class:`PlainSession` simply forwards
to the backend's own ``generate`` and ``score_continuations``; that is all a simple engine
needs (see :class:`~trustmargin_integrations.backends.openai_compat.OpenAICompatBackend`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class ContinuationRequest:
    """Score ``continuation`` after ``prompt``; both are tokenized separately, then joined."""

    prompt: str
    continuation: str


@dataclass(frozen=True)
class ContinuationScore:
    """Sum of the continuation's token log-probabilities and its token count."""

    logprob_sum: float
    num_tokens: int

    @property
    def mean(self) -> float:
        """Length-normalized log-likelihood (the paper's ``l(y)``)."""
        if self.num_tokens <= 0:
            raise ValueError("a continuation with no tokens has no normalized log-likelihood")
        return self.logprob_sum / self.num_tokens


@runtime_checkable
class ModelSession(Protocol):
    """Generation and scoring for one batch of questions (state may be shared between them)."""

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of rendered prompts (raw text, special tokens removed)."""
        ...

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation under its prompt."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A language-model engine: prompts and tokens in, text and log-likelihoods out."""

    model_id: str
    context_window: int | None
    """Most tokens the model attends to (prompt + generation); None when unknown."""

    def render_prompt(self, user_message: str) -> str:
        """Wrap a user message in the model's chat template (or return it unchanged)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` without special tokens (0: nothing to score)."""
        ...

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """The longest token prefix of ``text`` with at most ``max_tokens`` tokens, as text."""
        ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of rendered prompts (raw text, special tokens removed)."""
        ...

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation (the reference semantics)."""
        ...

    def session(self) -> AbstractContextManager[ModelSession]:
        """A scope for one batch's generation and scoring (see :class:`PlainSession`)."""
        ...


class PlainSession:
    """A session that forwards to the backend's ``generate`` and ``score_continuations``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations, straight from the backend."""
        return self.backend.generate(prompts, max_new_tokens)

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        """Log-likelihoods, straight from the backend."""
        return self.backend.score_continuations(requests)


@contextmanager
def plain_session(backend: Backend) -> Iterator[ModelSession]:
    """``Backend.session`` for engines with nothing to share between generation and scoring."""
    yield PlainSession(backend)


def count_tokens_many(backend: Backend, texts: Sequence[str]) -> list[int]:
    """Token counts of many texts: one batched tokenizer call where the backend has one
    (``count_tokens_batch`` is optional, so a minimal backend counts one text at a time)."""
    batch = getattr(backend, "count_tokens_batch", None)
    if batch is not None:
        return list(batch(texts))
    return [backend.count_tokens(text) for text in texts]
