"""``HFBackend``: a local transformers causal LM implementing the Backend protocol.

Loading (device, dtype, attention kernel) lives here; the backend holds the loaded model as
one record (:class:`~.loaded.LoadedModel`) and hands its calls to the parts that take that
record: token-level decoding (:mod:`.decoding`), the plain reference scoring
(:mod:`.reference`) and the per-batch session (:mod:`.session`, whose fast scoring is
:mod:`.tree`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch

from trustmargin_integrations.backends.base import (
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    StopPredicate,
)
from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.decoding import GreedyOutput, TokenDecoding
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.reference import score_plain
from trustmargin_integrations.backends.hf.session import HFSession
from trustmargin_integrations.backends.hf.static_cache import static_decode_unsupported
from trustmargin_integrations.backends.tokens import LocalTokenizerMixin
from trustmargin_integrations.errors import InvalidInputError, ModelLoadError

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def pick_device(device: str | None) -> torch.device:
    """``cuda`` when present, else ``cpu``; an explicit choice wins (when this machine has it).

    Raises:
        InvalidInputError: (field ``device``) not a device name, or one this machine lacks.
    """
    if not device:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise InvalidInputError("device", f"{device!r} is not a device name ({exc})",
                                "pass cpu, cuda or cuda:N (or leave it out)") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0 or (chosen.index or 0) >= count:
            raise InvalidInputError("device", f"{device!r} is not available: this machine has "
                                    f"{count} CUDA device(s)",
                                    "pass cpu, or a CUDA device this machine has")
    return chosen


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """fp32 on CPU; bf16 on a GPU that supports it, else fp16; an explicit choice wins."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype:
        try:
            return _DTYPES[dtype.lower()]
        except KeyError:
            raise ModelLoadError(f"dtype {dtype!r} is unknown. Fix: use one of "
                                 f"{sorted(_DTYPES)}") from None
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


@contextmanager
def _progress_bars(shown: bool) -> Iterator[None]:
    """transformers' progress bars ("Loading weights", on every load of even a small model)
    shown or hidden for one load; the caller's own setting comes back afterwards."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if shown:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
        else:
            hf_logging.disable_progress_bar()


def _load_causal_lm(source: str, dtype: torch.dtype, trust_remote_code: bool) -> Any:
    """The causal LM with an attention kernel that takes a 4D mask (the tree-masked scoring
    pass needs one): SDPA, else eager."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation="sdpa")
    except ValueError:
        return AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=trust_remote_code,
            attn_implementation="eager")


def _static_decode_choice(choice: bool | None, model: Any, device: torch.device) -> bool:
    """Whether generation runs the static-cache loop: asked for, or (``None``) on CUDA for
    a model it supports.

    Raises:
        InvalidInputError: (field ``static_decode``) asked for on a model it cannot run.
    """
    unsupported = static_decode_unsupported(model)
    if choice is None:
        return device.type == "cuda" and unsupported is None
    if choice and unsupported is not None:
        raise InvalidInputError("static_decode", f"the static-cache decode loop cannot run "
                                f"this model: {unsupported}",
                                "pass static_decode=False (or leave it out)")
    return choice


def numerics_threads(device: torch.device) -> int | None:
    """The CPU threads that compute a model's numbers on ``device`` (None on a GPU, whose
    numbers do not depend on them); see :func:`~..loading.cpu_threads`."""
    return torch.get_num_threads() if device.type == "cpu" else None


class HFBackend(LocalTokenizerMixin):
    """A local causal LM (transformers) implementing the Backend and TokenDecoder protocols.

    Args:
        model: a loaded ``PreTrainedModel`` (causal LM).
        tokenizer: its tokenizer.
        model_id: the name recorded in every Decision.
        fast: branch scoring off the generation caches in :meth:`session` (``False`` = the
            plain reference path, one forward pass per scored sequence).
        static_decode: decode on a static KV cache whose step is replayed as a CUDA graph
            (:mod:`.static_cache`; same tokens as the plain loop). ``None`` (default): on
            CUDA devices for models it supports, the plain loop elsewhere; ``True`` asks for
            it on any device (on CPU it runs without a graph); ``False`` turns it off.
        cuda_graphs: capture the static loop's step as a CUDA graph on CUDA (``False``
            runs the same static step without a graph).

    ``loaded`` is the model's record and ``decoding`` the :class:`~.decoding.TokenDecoding`
    that generation and the decoding calls go through (its ``static_decode``,
    ``static_check_every`` and ``last_decode_loop`` are the decode loop's settings).

    Raises:
        InvalidInputError: (field ``static_decode``) ``True`` for a model the static loop
            cannot run (sliding-window layers, remote code).
    """

    def __init__(self, model: Any, tokenizer: Any, model_id: str, *, fast: bool = True,
                 static_decode: bool | None = None, cuda_graphs: bool = True) -> None:
        self.loaded = LoadedModel.of(model, tokenizer)
        self.model_id = model_id
        self.parameters: int = sum(p.numel() for p in model.parameters())
        self.fast = fast
        window = getattr(model.config, "max_position_embeddings", None)
        self.context_window: int | None = window if isinstance(window, int) else None
        self.decoding = TokenDecoding(
            self.loaded, cuda_graphs=cuda_graphs,
            static_decode=_static_decode_choice(static_decode, model, self.loaded.device))

    # -- the loaded model, as the Backend and TokenDecoder protocols and adapters read it ----

    @property
    def model(self) -> Any:
        """The causal LM itself."""
        return self.loaded.model

    @property
    def tokenizer(self) -> Any:
        """Its tokenizer."""
        return self.loaded.tokenizer

    @property
    def device(self) -> torch.device:
        """Where the model runs."""
        return self.loaded.device

    @property
    def lock(self) -> threading.RLock:
        """Held around every forward pass (one model, one pass at a time)."""
        return self.loaded.lock

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Every id that ends a generated answer."""
        return self.loaded.eos_token_ids

    @property
    def pad_token_id(self) -> int:
        """The id left padding is made of."""
        return self.loaded.pad_token_id

    @property
    def capabilities(self) -> Capabilities:
        """A local transformers model: its name, dtype, (on CPU) thread count and size."""
        return Capabilities(kind="hf", model=self.model_id,
                            dtype=str(self.model.dtype).removeprefix("torch."),
                            threads=numerics_threads(self.device),
                            parameters=self.parameters)

    @classmethod
    def load(
        cls,
        model: str = "smollm2-135m",
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
        fast: bool = True,
        static_decode: bool | None = None,
        progress: bool = False,
    ) -> HFBackend:
        """Load a named model, a local directory, a ``.gguf`` file or a Hugging Face id.

        Quiet by default: a load takes seconds, so transformers' "Loading weights" bar is
        hidden unless ``progress=True``. The one-time conversion of a named model's GGUF file
        (tens of seconds) shows its own progress. ``static_decode``: see :class:`HFBackend`.
        """
        from transformers import AutoTokenizer

        from trustmargin_integrations.model_store import resolve_model

        model_id, local = resolve_model(model)
        source = str(local) if local is not None else model
        dev = pick_device(device)
        torch_dtype = pick_dtype(dtype, dev)
        try:
            with _progress_bars(progress):
                tokenizer = AutoTokenizer.from_pretrained(source,
                                                          trust_remote_code=trust_remote_code)
                lm = _load_causal_lm(source, torch_dtype, trust_remote_code)
        except OSError as exc:
            raise ModelLoadError(f"could not load model {model!r}: {exc}. Fix: check the id or "
                                 "path; hub ids need network access") from exc
        return cls(lm.to(dev), tokenizer, model_id, fast=fast, static_decode=static_decode)

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids (special tokens come from the chat template when there is one)."""
        return self.loaded.encode_prompt(prompt)

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """One plain forward pass per (prompt + continuation): the reference semantics."""
        return score_plain(self.loaded, requests)

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations, each ending at EOS, after ``max_new_tokens`` or after the
        token at which ``stop`` first holds for the text decoded so far."""
        encoded = [self.encode_prompt(p) for p in prompts]
        return self.decoding.greedy(encoded, max_new_tokens, stop=stop).texts

    def session(self) -> AbstractContextManager[ModelSession]:
        """A per-batch scope that keeps generation caches so scoring can branch off them."""
        return HFSession(self.decoding, fast=self.fast)

    # -- token-level decoding (the TokenDecoder protocol; see TokenDecoding) ----------------

    def decode_tokens(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens removed."""
        return self.decoding.decode_tokens(ids)

    def stop_holds(self, stop: StopPredicate | None, ids: Sequence[int]) -> bool:
        """See :meth:`TokenDecoding.stop_holds`."""
        return self.decoding.stop_holds(stop, ids)

    def prefill(self, prompts: Sequence[Sequence[int]], *,
                hidden_states: bool = False) -> DecodingBatch:
        """See :meth:`TokenDecoding.prefill`."""
        return self.decoding.prefill(prompts, hidden_states=hidden_states)

    def step(self, batch: DecodingBatch, tokens: Sequence[int] | torch.Tensor, *,
             hidden_states: bool = False) -> None:
        """See :meth:`TokenDecoding.step`."""
        self.decoding.step(batch, tokens, hidden_states=hidden_states)

    def greedy_steps(self, batch: DecodingBatch, max_new_tokens: int) -> Iterator[torch.Tensor]:
        """See :meth:`TokenDecoding.greedy_steps`."""
        return self.decoding.greedy_steps(batch, max_new_tokens)

    def greedy_tokens(self, prompt: Sequence[int], max_new_tokens: int) -> Iterator[int]:
        """See :meth:`TokenDecoding.greedy_tokens`."""
        return self.decoding.greedy_tokens(prompt, max_new_tokens)

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
               stop: StopPredicate | None = None, probabilities: bool = False) -> GreedyOutput:
        """See :meth:`TokenDecoding.greedy`."""
        return self.decoding.greedy(prompts, max_new_tokens, stop=stop,
                                    probabilities=probabilities)

    def token_probabilities(self, prefix: Sequence[int],
                            continuation: Sequence[int]) -> list[float]:
        """See :meth:`TokenDecoding.token_probabilities`."""
        return self.decoding.token_probabilities(prefix, continuation)
