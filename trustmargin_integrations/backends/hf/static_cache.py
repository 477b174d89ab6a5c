"""Greedy decoding on a preallocated ("static") KV cache, one CUDA graph replay per token.

The prompts' keys and values are copied once into fixed buffers (:class:`StaticKVCache`), and
each step reads and writes only tensors at fixed addresses, so on CUDA one step is captured
as a CUDA graph and replayed per token; the host checks EOS and the stop predicate every
``check_every`` steps, with the same result whatever ``check_every`` is. Why (host time set
the pace of the plain loop) and what it costs: docs/decisions.md.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator
from importlib.metadata import version
from typing import Any

import torch

from trustmargin_integrations.backends.hf.batch import DecodingBatch
from trustmargin_integrations.backends.hf.loaded import LoadedModel
from trustmargin_integrations.backends.hf.masks import model_mask, open_value

# One greedy step of every row: its tokens, and their probabilities when asked for.
Step = tuple[list[int], list[float] | None]

# Steps replayed between two reads of the history on CUDA: a read waits for the GPU, so
# reading at every step would idle it; at most check_every - 1 steps are decoded past the
# point where every row has ended (a few ms), and they change nothing.
CUDA_CHECK_EVERY = 4


def static_decode_unsupported(model: Any) -> str | None:
    """Why the static loop cannot run ``model`` (None when it can).

    The step hands the model one 4D mask for every layer, so sliding-window layers (which
    need their own mask) are out; remote-code models may handle the cache their own way; and
    transformers before 5 keeps a cache's tensors and positions elsewhere.
    """
    major = int(version("transformers").split(".")[0])
    if major < 5:
        return f"transformers {version('transformers')} is installed (5 or later is needed)"
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        other = sorted({t for t in layer_types if t != "full_attention"})
        if other:
            return f"the model has {', '.join(other)} layers (only full attention is supported)"
    elif getattr(config, "sliding_window", None) is not None:
        return "the model uses sliding-window attention (only full attention is supported)"
    if getattr(config, "auto_map", None):
        return "the model runs remote code, whose cache handling is not known"
    return None


class StaticKVCache:
    """Keys and values of every layer in buffers of a fixed length, written at ``slot``.

    The model calls :meth:`update` once per layer with the new token's keys and values and
    attends over the whole buffer (the mask hides the slots not yet written). Our own rather
    than transformers' ``StaticCache``: that class moved from a ``cache_position`` argument
    to an internal counter between 5.x releases, and this loop needs the prompts copied in
    from a prefill and the write slot as a tensor that a captured step advances.
    """

    def __init__(self, prompt_cache: Any, length: int, slot: torch.Tensor) -> None:
        self.slot = slot
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in prompt_cache.layers:
            keys, values = layer.keys, layer.values
            width = keys.shape[-2]
            static_keys = keys.new_zeros((*keys.shape[:-2], length, keys.shape[-1]))
            static_values = values.new_zeros((*values.shape[:-2], length, values.shape[-1]))
            static_keys[..., :width, :] = keys
            static_values[..., :width, :] = values
            self.layers.append((static_keys, static_values))

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one step's keys and values at ``slot``; the whole buffers are attended."""
        keys, values = self.layers[layer_idx]
        keys.index_copy_(-2, self.slot, key_states)
        values.index_copy_(-2, self.slot, value_states)
        return keys, values


class StaticDecoder:
    """The greedy steps after the prefill of ``batch``, on a :class:`StaticKVCache`.

    ``first`` holds each row's first greedy token (from the prefill's logits); ``steps`` is
    the number of tokens still to be fed. With ``capture`` on a CUDA device the step is
    captured as a CUDA graph after one plain (warm-up) step; ``captured`` says whether it was.
    """

    def __init__(self, loaded: LoadedModel, batch: DecodingBatch, first: torch.Tensor,
                 steps: int, *, probabilities: bool, capture: bool) -> None:
        device = loaded.device
        self.loaded = loaded
        self.steps = steps
        self.probabilities = probabilities
        self.capture = capture and device.type == "cuda"
        self.captured = False
        self.slot = torch.tensor([batch.width], device=device)
        self.cache = StaticKVCache(batch.cache, batch.width + steps, self.slot)
        allowed = torch.zeros((batch.rows, 1, 1, batch.width + steps), dtype=torch.bool,
                              device=device)
        allowed[:, 0, 0, :batch.width] = batch.mask.bool()
        self.mask = model_mask(loaded.model, allowed)
        self.fed = first.reshape(batch.rows, 1).clone()
        self.positions = batch.next_positions.clone()
        self.count = torch.zeros(1, dtype=torch.long, device=device)
        self.tokens = torch.zeros((batch.rows, steps), dtype=torch.long, device=device)
        self.token_probs = torch.zeros((batch.rows, steps if probabilities else 0),
                                       dtype=torch.float32, device=device)

    def _step(self) -> None:
        """Feed ``fed`` at ``slot`` and record the greedy tokens that follow; every tensor
        is updated in place, so a captured graph of this replays the next step."""
        loaded = self.loaded
        self.mask.index_fill_(-1, self.slot, open_value(self.mask))
        logits = loaded.model(input_ids=self.fed, attention_mask=self.mask,
                               position_ids=self.positions, use_cache=True, logits_to_keep=1,
                               **{loaded.cache_kwarg: self.cache}).logits[:, -1]
        chosen = logits.argmax(-1)
        self.tokens.index_copy_(1, self.count, chosen[:, None])
        if self.probabilities:
            picked = torch.softmax(logits.float(), dim=-1).gather(1, chosen[:, None])
            self.token_probs.index_copy_(1, self.count, picked)
        self.fed.copy_(chosen[:, None])
        self.positions.add_(1)
        self.slot.add_(1)
        self.count.add_(1)

    def _capture(self) -> torch.cuda.CUDAGraph | None:
        """Run one real step on a side stream (kernel choice and workspaces happen outside
        the graph), then capture the next one; None (with a warning) when capture fails,
        and the remaining steps run plainly with the same result."""
        device = self.loaded.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._step()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            # Thread-local: other threads (async adapters run generation in workers) may
            # use CUDA while this one captures; only this thread's calls are recorded.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._step()
        except RuntimeError as exc:
            warnings.warn(f"static-cache decoding: the CUDA graph capture failed ({exc}); "
                          "decoding without a graph", RuntimeWarning, stacklevel=3)
            torch.cuda.synchronize(device)
            return None
        self.captured = True
        return graph

    @torch.inference_mode()
    def chunks(self, check_every: int) -> Generator[list[Step], None, None]:
        """The decoded steps, ``check_every`` at a time (stop iterating to stop)."""
        graph = None
        ran = done = 0
        with self.loaded.lock:
            if self.capture and self.steps > 1:
                graph = self._capture()
                ran = 1  # the warm-up step before the capture was a real one
        while done < self.steps:
            end = min(done + check_every, self.steps)
            with self.loaded.lock:
                while ran < end:
                    if graph is not None:
                        graph.replay()
                    else:
                        self._step()
                    ran += 1
            tokens = self.tokens[:, done:end].T.tolist()
            probs = (self.token_probs[:, done:end].T.tolist() if self.probabilities
                     else [None] * len(tokens))
            yield list(zip(tokens, probs, strict=True))
            done = end
