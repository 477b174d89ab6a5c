"""Local transformers backend with shared-prefix scoring and generation-cache reuse.

The arbiter drives one batch of questions through :meth:`HFBackend.session`:

1. ``session.generate`` prefills the question-only prompts (and greedily decodes the Direct
   answers) in one left-padded batch, and the question-context prompts likewise for the RAG
   answers. Each batch keeps its KV cache, cropped back to the prompts.
2. ``session.score`` turns every scoring request into a *stem* off the cached prompt it
   shares the longest token prefix with: a number of visible cached tokens, the tokens to
   feed, then the answers as children. A view's own generation cache gives a one-token
   stem; the context-only view shares the passage prefix with the question+context prompt,
   so it is a stem that sees that prefix and feeds its own short tail. Prompts no cache
   covers (candidates given, nothing generated) are prefilled once and branched the same way.
3. All stems of a row are packed into one short sequence after the cached prompt and run in
   a single forward pass with a tree-shaped 4D attention mask (each token sees its visible
   prompt part, its stem and itself), so no cache is copied and no prefix is recomputed; the
   vocabulary projection runs only where an answer token is predicted.

``score_continuations`` is the plain reference: one full forward pass per sequence. The fast
path agrees with it to about 1e-6 in fp32 (tests hold it to 1e-4).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
)
from trustmargin_integrations.backends.tokens import LocalTokenizerMixin
from trustmargin_integrations.errors import BackendError, ModelLoadError

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


def pick_device(device: str | None) -> torch.device:
    """``cuda`` when present, else ``cpu``; an explicit choice wins."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


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


@dataclass(frozen=True)
class Stem:
    """Tokens fed after a cached prompt, with several answers scored as children.

    The stem sees the first ``visible`` real tokens of the cached prompt, then its own
    ``feed`` tokens (at least one; the last one's logits predict each answer's first token).
    Every target sees the prompt part and the whole feed, but not the other targets.
    """

    visible: int
    feed: tuple[int, ...]
    targets: tuple[tuple[int, ...], ...]

    @property
    def length(self) -> int:
        """Tokens the stem occupies in the packed sequence."""
        return len(self.feed) + sum(len(t) for t in self.targets)


@dataclass
class PrefilledBatch:
    """A left-padded batch of prompts with its KV cache (holding exactly the prompts)."""

    cache: Any
    pads: list[int]
    width: int
    generated: list[list[int]]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens two sequences share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class HFBackend(LocalTokenizerMixin):
    """A local causal LM (transformers) implementing the Backend protocol.

    Args:
        model: a loaded ``PreTrainedModel`` (causal LM).
        tokenizer: its tokenizer.
        model_id: the name recorded in every Decision.
        fast: branch scoring off the generation caches in :meth:`session` (``False`` = the
            plain reference path, one forward pass per scored sequence).
    """

    def __init__(self, model: Any, tokenizer: Any, model_id: str, *, fast: bool = True) -> None:
        self.model = model.eval()
        # One model must not run two forward passes at once (LCEL runs parallel branches in
        # threads; async adapters score in worker threads), so model calls are serialized.
        self._lock = threading.RLock()
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.fast = fast
        self.device = next(model.parameters()).device
        self._chat = self.has_chat_template
        eos = {tokenizer.eos_token_id}
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos])
        self._eos = {e for e in eos if e is not None}
        pad = tokenizer.pad_token_id
        self._pad = pad if pad is not None else min(self._eos, default=0)
        self._line_breaks: frozenset[int] | None = None
        window = getattr(model.config, "max_position_embeddings", None)
        self.context_window: int | None = window if isinstance(window, int) else None

    @classmethod
    def load(
        cls,
        model: str = "smollm2-135m",
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        trust_remote_code: bool = False,
        fast: bool = True,
    ) -> HFBackend:
        """Load a named model, a local directory, a ``.gguf`` file or a Hugging Face id."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from trustmargin_integrations.models import resolve_model

        model_id, local = resolve_model(model)
        source = str(local) if local is not None else model
        dev = pick_device(device)
        torch_dtype = pick_dtype(dtype, dev)
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
            try:
                # The tree-masked scoring pass needs an attention kernel that takes a 4D mask.
                lm = AutoModelForCausalLM.from_pretrained(
                    source, dtype=torch_dtype, trust_remote_code=trust_remote_code,
                    attn_implementation="sdpa",
                )
            except ValueError:
                lm = AutoModelForCausalLM.from_pretrained(
                    source, dtype=torch_dtype, trust_remote_code=trust_remote_code,
                    attn_implementation="eager",
                )
        except OSError as exc:
            raise ModelLoadError(f"could not load model {model!r}: {exc}. Fix: check the id or "
                                 "path; hub ids need network access") from exc
        return cls(lm.to(dev), tokenizer, model_id, fast=fast)

    # -- text and tokens --------------------------------------------------------------------

    def encode_prompt(self, prompt: str) -> list[int]:
        """Prompt token ids (special tokens come from the chat template when there is one)."""
        return list(self.tokenizer(prompt, add_special_tokens=not self._chat).input_ids)

    # -- reference path ---------------------------------------------------------------------

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """One plain forward pass per (prompt + continuation): the reference semantics."""
        with self._lock:
            return self._score_plain(requests)

    @torch.inference_mode()
    def _score_plain(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        out = []
        for req in requests:
            prompt, answer = self.encode_prompt(req.prompt), self.encode_answer(req.continuation)
            if not answer:
                out.append(ContinuationScore(0.0, 0))
                continue
            ids = torch.tensor([prompt + answer], device=self.device)
            logits = self.model(ids).logits[0, len(prompt) - 1:-1].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            picked = logprobs.gather(1, torch.tensor(answer, device=self.device)[:, None])
            out.append(ContinuationScore(float(picked.sum()), len(answer)))
        return out

    # -- generation -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations (stopping at EOS or once the first answer line is complete)."""
        encoded = [self.encode_prompt(p) for p in prompts]
        with self._lock:
            batch = self._prefill(encoded, max_new_tokens)
        return [self._decode(ids) for ids in batch.generated]

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def line_break_tokens(self) -> frozenset[int]:
        """Ids of the tokens whose text holds a line break (computed once, ~0.3 s / 50k).

        Only such a token can complete a generation's first answer line, so greedy decoding
        decodes a row's text (to check :func:`answer_complete`) only at those steps instead
        of at every step.
        """
        if self._line_breaks is None:
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._line_breaks = frozenset(i for i, t in enumerate(texts)
                                          if "\n" in t or "\r" in t)
        return self._line_breaks

    @torch.inference_mode()
    def _prefill(self, prompts: list[list[int]], max_new_tokens: int) -> PrefilledBatch:
        """Prefill left-padded prompts, greedily decode, and crop the cache to the prompts."""
        from transformers import DynamicCache

        if any(not p for p in prompts):
            raise BackendError("a prompt tokenized to nothing; prompts must be non-empty")
        width = max(len(p) for p in prompts)
        pads = [width - len(p) for p in prompts]
        ids = torch.tensor([[self._pad] * pad + p for pad, p in zip(pads, prompts, strict=True)],
                           device=self.device)
        mask = torch.tensor([[0] * pad + [1] * len(p) for pad, p in zip(pads, prompts,
                                                                           strict=True)],
                            device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        generated: list[list[int]] = [[] for _ in prompts]
        done = [False] * len(prompts)
        line_breaks = self.line_break_tokens() if max_new_tokens else frozenset()
        logits = out.logits[:, -1]
        next_pos = positions[:, -1:] + 1
        for step in range(max_new_tokens):
            tokens = logits.argmax(-1)
            for row, tok in enumerate(tokens.tolist()):
                if done[row]:
                    continue
                if tok in self._eos:
                    done[row] = True
                    continue
                generated[row].append(tok)
                if tok in line_breaks and answer_complete(self._decode(generated[row])):
                    done[row] = True
            if all(done) or step == max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=tokens[:, None], attention_mask=mask,
                             position_ids=next_pos, past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1]
            next_pos = next_pos + 1
        extra = cache.get_seq_length() - width
        if extra > 0:
            # A negative argument removes that many tokens in every transformers version.
            cache.crop(-extra)
        return PrefilledBatch(cache, pads, width, generated)

    # -- fast scoring -----------------------------------------------------------------------

    @torch.inference_mode()
    def _score_stems(
        self, batch: PrefilledBatch, rows: list[int], stems: list[list[Stem]]
    ) -> list[list[ContinuationScore]]:
        """Score every target of every stem of the selected rows in one forward pass.

        Each row's stems are packed into one short sequence after its cached prompt; a 4D
        attention mask gives every token exactly the context it has in a plain forward pass.
        The cache is consumed (it grows by the packed tokens).
        """
        cache = batch.cache
        if len(rows) != len(batch.pads):
            cache.batch_select_indices(torch.tensor(rows, device=self.device))
        pads = [batch.pads[r] for r in rows]
        width = batch.width
        span = max(sum(stem.length for stem in row) for row in stems)
        n = len(rows)
        ids = torch.full((n, span), self._pad, dtype=torch.long)
        positions = torch.zeros((n, span), dtype=torch.long)
        allowed = torch.zeros((n, 1, span, width + span), dtype=torch.bool)
        # (row, stem, target) -> packed positions whose logits predict that target's tokens.
        predictors: list[list[list[list[int]]]] = []
        for r, row in enumerate(stems):
            start, row_predictors = 0, []
            for stem in row:
                feed_end = start + len(stem.feed)
                ids[r, start:feed_end] = torch.tensor(stem.feed)
                positions[r, start:feed_end] = torch.arange(stem.visible, stem.visible
                                                            + len(stem.feed))
                allowed[r, 0, start:start + stem.length, pads[r]:pads[r] + stem.visible] = True
                allowed[r, 0, start:feed_end, width + start:width + feed_end] = torch.ones(
                    (len(stem.feed), len(stem.feed)), dtype=torch.bool).tril()
                cursor, stem_predictors = feed_end, []
                for target in stem.targets:
                    stop = cursor + len(target)
                    ids[r, cursor:stop] = torch.tensor(target)
                    positions[r, cursor:stop] = torch.arange(
                        stem.visible + len(stem.feed), stem.visible + len(stem.feed)
                        + len(target))
                    allowed[r, 0, cursor:stop, width + start:width + feed_end] = True
                    allowed[r, 0, cursor:stop, width + cursor:width + stop] = torch.ones(
                        (len(target), len(target)), dtype=torch.bool).tril()
                    stem_predictors.append([feed_end - 1, *range(cursor, stop - 1)])
                    cursor = stop
                row_predictors.append(stem_predictors)
                start = cursor
            for q in range(start, span):
                # Padding queries see only themselves, which keeps softmax finite.
                allowed[r, 0, q, width + q] = True
            predictors.append(row_predictors)
        # Only positions that predict an answer token need the vocabulary projection.
        needed = sorted({p for row in predictors for stem in row for t in stem for p in t})
        column = {p: i for i, p in enumerate(needed)}
        mask = allowed if self._bool_masks() else self._additive(allowed)
        logits = self.model(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
            position_ids=positions.to(self.device), past_key_values=cache, use_cache=True,
            logits_to_keep=torch.tensor(needed, device=self.device),
        ).logits
        results: list[list[ContinuationScore]] = []
        for r, row in enumerate(stems):
            scores = []
            for stem, stem_predictors in zip(row, predictors[r], strict=True):
                for target, where in zip(stem.targets, stem_predictors, strict=True):
                    cols = torch.tensor([column[p] for p in where], device=self.device)
                    logprobs = logits[r, cols].float().log_softmax(-1)
                    picked = logprobs.gather(1, torch.tensor(target, device=self.device)[:, None])
                    scores.append(ContinuationScore(float(picked.sum()), len(target)))
            results.append(scores)
        return results

    def _bool_masks(self) -> bool:
        return getattr(self.model.config, "_attn_implementation", "sdpa") == "sdpa"

    def _additive(self, allowed: torch.Tensor) -> torch.Tensor:
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype)
        return mask.masked_fill(~allowed, torch.finfo(dtype).min)

    # -- sessions: generation caches kept for scoring ---------------------------------------

    def session(self) -> AbstractContextManager[ModelSession]:
        """A per-batch scope that keeps generation caches so scoring can branch off them."""
        return HFSession(self)

    def _plan_and_score(
        self,
        requests: Sequence[ContinuationRequest],
        caches: list[CachedPrompts],
        known: dict[str, list[int]] | None = None,
    ) -> list[ContinuationScore]:
        """Score every request as a stem off the cached prompt it shares most tokens with.

        Prompts that no cache covers are prefilled (in length-bucketed batches) first; a
        prompt whose tail after the best shared prefix is short (a context-only view next to
        its question+context view, a question-only view next to any chat prompt) is fed as a
        stem instead. Each cache is consumed by its one scoring pass. ``known`` maps prompts
        generation already tokenized to their ids (a 2k-token prompt is not tokenized twice).
        """
        results: list[ContinuationScore | None] = [None] * len(requests)
        by_prompt: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
        for n, req in enumerate(requests):
            answer = tuple(self.encode_answer(req.continuation))
            if not answer:
                results[n] = ContinuationScore(0.0, 0)
                continue
            by_prompt.setdefault(req.prompt, []).append((n, answer))
        if by_prompt:
            known = known or {}
            encoded = {prompt: known[prompt] if prompt in known else self.encode_prompt(prompt)
                       for prompt in by_prompt}
            branches = {p: _best_branch(ids, caches) for p, ids in encoded.items()}
            uncovered = [p for p, branch in branches.items() if branch is None]
            for bucket in _length_buckets(_prefill_choice(uncovered, encoded)):
                ids = [encoded[p] for p in bucket]
                caches.append(CachedPrompts(self._prefill(ids, 0), ids))
            for p in uncovered:
                branches[p] = _best_branch(encoded[p], caches, limit=None)
            plan: dict[int, dict[int, list[tuple[Stem, list[int]]]]] = {}
            for prompt, targets in by_prompt.items():
                ids = encoded[prompt]
                branch = branches[prompt]
                assert branch is not None  # every prompt is covered after the prefills
                c, row, visible = branch
                stem = Stem(visible, tuple(ids[visible:]), tuple(t for _, t in targets))
                plan.setdefault(c, {}).setdefault(row, []).append((stem, [n for n, _ in targets]))
            for c, rows in plan.items():
                order = sorted(rows)
                scores = self._score_stems(caches[c].batch, order,
                                           [[stem for stem, _ in rows[r]] for r in order])
                for r, row_scores in zip(order, scores, strict=True):
                    flat = [n for _, ns in rows[r] for n in ns]
                    for n, score in zip(flat, row_scores, strict=True):
                        results[n] = score
                caches[c].consumed = True
        return [r for r in results if r is not None]


@dataclass
class CachedPrompts:
    """A prefilled batch kept for scoring, with the token ids of its prompts."""

    batch: PrefilledBatch
    prompts: list[list[int]]
    consumed: bool = False


# A prompt is fed as a stem off a cached prompt when at most this many of its tokens are not
# shared: the context-only and question-only views (tens of tokens) qualify; a prompt with
# its own long passage context gets a prefill of its own.
_MAX_STEM_TAIL = 128


def _visible(ids: list[int], cached: list[int]) -> int:
    """Cached tokens a stem of ``ids`` can see: the shared prefix, leaving at least one token
    to feed (its logits predict the answer's first token)."""
    return min(common_prefix_length(ids, cached), len(ids) - 1)


def _best_branch(
    ids: list[int], caches: list[CachedPrompts], limit: int | None = _MAX_STEM_TAIL
) -> tuple[int, int, int] | None:
    """(cache, row, visible tokens) of the cached prompt sharing most of ``ids``'s prefix;
    None when no unconsumed cache leaves a tail of at most ``limit`` tokens."""
    best: tuple[int, int, int] | None = None
    for c, cached in enumerate(caches):
        if cached.consumed:
            continue
        for row, prompt in enumerate(cached.prompts):
            visible = _visible(ids, prompt)
            if best is None or visible > best[2]:
                best = (c, row, visible)
    if best is None or (limit is not None and len(ids) - best[2] > limit):
        return None
    return best


def _prefill_choice(prompts: list[str], encoded: dict[str, list[int]]) -> list[str]:
    """The fewest prompts to prefill so every prompt is covered (longest first, greedy)."""
    chosen: list[str] = []
    for prompt in sorted(prompts, key=lambda p: -len(encoded[p])):
        ids = encoded[prompt]
        visible = max((_visible(ids, encoded[c]) for c in chosen), default=0)
        if not chosen or len(ids) - visible > _MAX_STEM_TAIL:
            chosen.append(prompt)
    return chosen


def _length_buckets(prompts: list[str]) -> list[list[str]]:
    """Group prompts of similar length so a left-padded batch wastes little compute."""
    buckets: list[list[str]] = []
    for prompt in sorted(prompts, key=len):
        if buckets and len(prompt) <= 2 * len(buckets[-1][0]):
            buckets[-1].append(prompt)
        else:
            buckets.append([prompt])
    return buckets


class HFSession:
    """One batch's generation and scoring on an :class:`HFBackend`.

    ``generate`` keeps each batch's KV cache (cropped to the prompts); ``score`` branches
    every request off the cached prompt it shares the longest prefix with. With
    ``backend.fast`` off, both calls are the plain reference path.
    """

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self._caches: list[CachedPrompts] = []
        self._encoded: dict[str, list[int]] = {}

    def __enter__(self) -> HFSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self._caches.clear()
        self._encoded.clear()

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations; the prompts' cache stays for :meth:`score`."""
        backend = self.backend
        encoded = [backend.encode_prompt(p) for p in prompts]
        with backend._lock:
            batch = backend._prefill(encoded, max_new_tokens)
        if backend.fast:
            self._caches.append(CachedPrompts(batch, encoded))
            self._encoded.update(zip(prompts, encoded, strict=True))
        return [backend._decode(ids) for ids in batch.generated]

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        """Teacher-forced log-likelihoods, branching off this session's caches."""
        backend = self.backend
        with backend._lock:
            if not backend.fast:
                return backend._score_plain(requests)
            return backend._plan_and_score(requests, self._caches, self._encoded)
