"""The backend protocol: what TrustMargin needs from a language model, and nothing more.

A backend renders prompts with the model's chat template, counts tokens, generates greedy
continuations (honouring an optional :data:`StopPredicate`) and scores continuations
(teacher-forced log-likelihoods); what to generate, score and decide is the arbiter's. The
arbiter works inside ``with backend.session() as s:`` (``s.generate`` then ``s.score``);
:class:`PlainSession` forwards to the backend, :class:`Capabilities` says what it is,
:class:`EngineDefaults` gives batching and batch counting to any engine, and
:class:`TokenDecoder` is the token-by-token contract FLARE and CLeHe need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

StopPredicate = Callable[[str], bool]
"""When to end one greedy generation early: called with the text decoded so far (the newest
token included); True ends that generation after its newest token. ``None`` in its place means
"stop only at EOS or after ``max_new_tokens``".

A predicate may carry a ``check_after`` attribute, a string of characters: a promise that it
can only turn true after a token whose text holds one of them. A token-level decoder then
tests it only after such tokens (their ids are computed once per tokenizer) instead of
decoding every row's text at every step.
:func:`~trustmargin_integrations.answers.answer_complete` carries ``check_after = "\n\r"``.
"""


def stop_check_after(stop: StopPredicate | None) -> str | None:
    """The characters after which ``stop`` can turn true (None: after any token)."""
    chars = getattr(stop, "check_after", None)
    return chars if isinstance(chars, str) and chars else None


def cut_at_stop(text: str, stop: StopPredicate | None) -> str:
    """``text`` up to the first character after which ``stop`` holds (all of it when it never
    does): the stop rule for an engine that only sees finished text, such as a server."""
    if stop is None:
        return text
    chars = stop_check_after(stop)
    for end in range(1, len(text) + 1):
        if (chars is None or text[end - 1] in chars) and stop(text[:end]):
            return text[:end]
    return text


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


@dataclass(frozen=True)
class Capabilities:
    """What an engine declares about itself, read by the commands and the run caches.

    Attributes:
        kind: the engine family: ``hf`` (local transformers), ``openai`` (an OpenAI-compatible
            server), or another engine's own name.
        model: the model the engine runs: what a local backend loaded, a server's served name.
        dtype: the dtype of a local model's numbers (None: not known, e.g. a server's).
        threads: the CPU threads a local model computes with on CPU (None on a GPU or a
            server): float reductions change with it, so it is part of a local result's key.
        parameters: how many parameters the model has (None: not known, e.g. a server's).
    """

    kind: str
    model: str
    dtype: str | None = None
    threads: int | None = None
    parameters: int | None = None

    @property
    def label(self) -> str:
        """``kind:model``, e.g. ``hf:smollm2-135m`` or ``openai:smollm2-135m``."""
        return f"{self.kind}:{self.model}"


@runtime_checkable
class ModelSession(Protocol):
    """Generation and scoring for one batch of questions (state may be shared between them)."""

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations of rendered prompts (raw text, special tokens removed), each
        ending at EOS, after ``max_new_tokens`` or where ``stop`` first holds."""
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

    @property
    def capabilities(self) -> Capabilities:
        """The engine's kind, model and numerics (see :class:`Capabilities`)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` without special tokens (0: nothing to score)."""
        ...

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """``count_tokens`` of each text (one tokenizer call where the engine can)."""
        ...

    def batches(self, lengths: Sequence[int], size: int) -> list[list[int]]:
        """The indices of requests of these lengths grouped into model calls of at most
        ``size``, in the order to run them (see :meth:`EngineDefaults.batches`)."""
        ...

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """The longest token prefix of ``text`` with at most ``max_tokens`` tokens, as text."""
        ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations of rendered prompts (raw text, special tokens removed), each
        ending at EOS, after ``max_new_tokens`` or where ``stop`` first holds."""
        ...

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation (the reference semantics)."""
        ...

    def session(self) -> AbstractContextManager[ModelSession]:
        """A scope for one batch's generation and scoring (see :class:`PlainSession`)."""
        ...


@runtime_checkable
class TokenDecoder(Backend, Protocol):
    """A backend that also decodes token by token on a local model (what FLARE and CLeHe read:
    next-token logits, hidden states, token probabilities). The tensors are torch tensors;
    :class:`~trustmargin_integrations.backends.hf.HFBackend` implements it (see
    :mod:`trustmargin_integrations.backends.hf.decoding`)."""

    model: Any
    """The causal LM itself (its config, final norm and output head are read by CLeHe)."""
    eos_token_ids: frozenset[int]

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt."""
        ...

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of token ids (special tokens removed)."""
        ...

    def prefill(self, prompts: Sequence[Sequence[int]], *, hidden_states: bool = False) -> Any:
        """Run a left-padded batch of prompts; the batch holds the next-token logits."""
        ...

    def step(self, batch: Any, tokens: Sequence[int], *, hidden_states: bool = False) -> None:
        """Feed one token per row of a prefilled batch; its logits move one step on."""
        ...

    def greedy_tokens(self, prompt: Sequence[int], max_new_tokens: int) -> Iterator[int]:
        """The greedy continuation of one prompt, token by token (stop iterating to stop)."""
        ...

    def stop_holds(self, stop: StopPredicate | None, ids: Sequence[int]) -> bool:
        """True when ``stop`` holds for generated ``ids`` (checked as greedy decoding does)."""
        ...

    def token_probabilities(self, prefix: Sequence[int],
                            continuation: Sequence[int]) -> list[float]:
        """Probability of each continuation token after ``prefix`` (one plain forward pass)."""
        ...


class PlainSession:
    """A session that forwards to the backend's ``generate`` and ``score_continuations``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations, straight from the backend."""
        return self.backend.generate(prompts, max_new_tokens, stop=stop)

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        """Log-likelihoods, straight from the backend."""
        return self.backend.score_continuations(requests)


@contextmanager
def plain_session(backend: Backend) -> Iterator[ModelSession]:
    """``Backend.session`` for engines with nothing to share between generation and scoring."""
    yield PlainSession(backend)


class EngineDefaults:
    """The protocol members an engine may leave to these defaults: token counts one text at
    a time and length-sorted batches. Subclass it (with ``count_tokens`` of your own)."""

    def count_tokens(self, text: str) -> int:  # pragma: no cover - every engine overrides it
        raise NotImplementedError

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """``count_tokens`` of each text, one at a time."""
        return [self.count_tokens(text) for text in texts]

    def batches(self, lengths: Sequence[int], size: int) -> list[list[int]]:
        """Requests sorted by length (stably), cut into calls of ``size``: a local model pads
        each call to its longest prompt, so similar lengths waste the least compute."""
        if size < 1:
            raise ValueError(f"a batch holds at least one request, got size {size}")
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        return [order[start:start + size] for start in range(0, len(order), size)]
