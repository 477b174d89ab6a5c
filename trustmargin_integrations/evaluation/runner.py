"""The resumable evaluation loop: examples -> passages -> TrustMargin (cached) -> records.

One pass stores each example's Decision (both candidates, the six log-likelihoods, timings)
a batch at a time in a :class:`~.store.ResultStore`; every method of the tables and the
lambda x tau grid are replayed from it without the model. Passages come from the dataset
(:class:`PrecomputedPassages`) or any retriever (:class:`RetrieverPassages`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.records import (
    EvalRecord,
    NoiseRecord,
    eval_value,
    read_eval_record,
    read_noise_record,
)
from trustmargin_integrations.prompts import PROMPT_VERSION, form_prompts
from trustmargin_integrations.resumable import ChunkCallback, run_chunks
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import Decision, Passage
from trustmargin_integrations.store import ResultStore, cache_key

__all__ = [
    "EvalRecord",
    "NoiseRecord",
    "PassageSource",
    "PrecomputedPassages",
    "RetrieverPassages",
    "RunSettings",
    "cached_records",
    "example_key",
    "inject_noise",
    "model_dtype",
    "run_eval",
    "run_noise",
    "settings_for",
]


class PassageSource(Protocol):
    """Gives the top-k passages of each example and the seconds spent per example."""

    name: str

    def fetch(self, examples: Sequence[EvalExample], k: int) -> list[tuple[list[Passage], float]]:
        """Passages (best first) and retrieval seconds for each example, in order."""
        ...


class PrecomputedPassages:
    """Mode (a): the passages shipped with the dataset, cut to the first ``k``.

    Args:
        fix: how the command that uses it gets passages another way (the error's fix when an
            example ships none).
    """

    name = "precomputed"

    def __init__(self, fix: str = "use --retrieval bm25 with --corpus, or a dataset that "
                                  "ships passages") -> None:
        self.fix = fix

    def check(self, examples: Sequence[EvalExample]) -> None:
        """Refuse an example without a non-blank passage (called before the model loads)."""
        for ex in examples:
            if not ex.passages:
                raise InvalidInputError(f"{ex.dataset}[{ex.id}].passages",
                                        "are missing or all blank", self.fix)

    def fetch(self, examples: Sequence[EvalExample], k: int) -> list[tuple[list[Passage], float]]:
        """The first ``k`` shipped passages of each example (no retrieval time)."""
        self.check(examples)
        return [(list((ex.passages or ())[:k]), 0.0) for ex in examples]


def passages_shown(source: PassageSource, examples: Sequence[EvalExample], k: int) -> str:
    """What a run's header says of its passages: the records' own count for precomputed
    passages (what they carry, at most ``k``: "precomputed, 2 passages per question" or
    "1-3"), else the source's name and ``top-k``."""
    if not isinstance(source, PrecomputedPassages):
        return f"{source.name} top-{k}"
    counts = sorted({min(len(ex.passages or ()), k) for ex in examples})
    if not counts:
        return f"{source.name} top-{k}"
    many = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{source.name}, {many} passage{'s' if counts[-1] != 1 else ''} per question"


class RetrieverPassages:
    """Modes (b) and (c): the pipeline's retrieval stage over a retriever (BM25Index,
    Elasticsearch, ...), the same :func:`~trustmargin_integrations.retrieval.base.retrieve_batch`
    that ``TrustMargin.answer_batch`` uses."""

    def __init__(self, retriever: Retriever, name: str = "retriever") -> None:
        if not callable(getattr(retriever, "search", None)):
            raise InvalidInputError("retriever", "has no search(query, k) method",
                                    "pass a BM25Index or any object with search(query, k)")
        self.retriever = retriever
        self.name = name

    def fetch(self, examples: Sequence[EvalExample], k: int) -> list[tuple[list[Passage], float]]:
        """Search every question in one batch; the batch time is split evenly."""
        if not examples:
            return []
        start = time.perf_counter()
        hits = retrieve_batch(self.retriever, [ex.question for ex in examples], k)
        share = (time.perf_counter() - start) / len(examples)
        return [(row, share) for row in hits]


@dataclass(frozen=True)
class RunSettings:
    """What, besides model, prompts, passages and question, determines cached results."""

    top_k: int
    dtype: str
    retrieval: str
    max_new_tokens: int
    max_context_tokens: int
    skip_scoring_when_agree: bool
    threads: int | None = None
    """CPU threads of a local model on CPU (:func:`~..backends.loading.cpu_threads`); None
    on a GPU or a server, and then left out of the key."""
    engine: str | None = None
    """``kind:model`` of an engine other than the local one (``openai:smollm2-135m``): a
    server's answers are its model's, not the local model's of the same name. None for a
    local model (whose dtype and threads say it), and then left out of the key, so local
    keys are what they always were."""

    def as_dict(self) -> dict[str, Any]:
        """Plain mapping (part of the cache key)."""
        return {k: v for k, v in self.__dict__.items()
                if not (k in ("threads", "engine") and v is None)}


def model_dtype(tm: TrustMargin) -> str:
    """The dtype the backend's model runs in (``"unknown"`` when it does not say, e.g. a
    server)."""
    return tm.backend.capabilities.dtype or "unknown"


def settings_for(tm: TrustMargin, *, top_k: int, dtype: str | None, retrieval: str
                 ) -> RunSettings:
    """The key-relevant settings of a run with ``tm`` (dtype defaults to the model's)."""
    cfg = tm.config
    engine = tm.backend.capabilities
    return RunSettings(top_k=top_k, dtype=dtype or model_dtype(tm), retrieval=retrieval,
                       max_new_tokens=cfg.max_new_tokens,
                       max_context_tokens=cfg.max_context_tokens,
                       skip_scoring_when_agree=cfg.skip_scoring_when_agree,
                       threads=engine.threads,
                       engine=None if engine.kind == "hf" else engine.label)


@dataclass
class _Pending:
    example: EvalExample
    key: str
    passages: list[str]  # the context texts, as keyed
    retrieval_s: float
    direct_answer: str | None
    evidence: list[Passage] | None = None  # the records, when retrieved (ids reach the Decision)
    rag_answer: str | None = None  # given with direct_answer: a user's chain's two texts


def example_key(tm: TrustMargin, settings: Mapping[str, Any], question: str,
                passages: Sequence[str], direct_answer: str | None,
                rag_answer: str | None = None) -> str:
    """The cache key of one example's result under ``tm`` (model and prompt version) and the
    run's ``settings`` (:meth:`RunSettings.as_dict`, plus whatever else the result depends
    on, e.g. a pipeline and its parameters)."""
    return cache_key(model_id=tm.backend.model_id, prompt_version=PROMPT_VERSION,
                     question=question, passages=passages, settings=settings,
                     direct_answer=direct_answer, rag_answer=rag_answer)


def short_answer_arbiter(tm: TrustMargin) -> TrustMargin:
    """``tm`` for short answers of the product's own prompts given back as texts (a noise
    run's Direct answers, other pipelines' answers): each scored whole, the paper's way,
    rather than compared as a chain's chat texts (the ``"paper"`` form cuts a given text as a
    generation is cut); the same model, nothing reloaded."""
    return TrustMargin(tm.backend, tm.config.model_copy(update={"scoring_form": "paper"}))


def _input(pending: _Pending) -> dict[str, Any]:
    """The arbitration input of one pending item (its given texts, when it has them)."""
    given = {"rag_answer": pending.rag_answer} if pending.rag_answer is not None else {}
    return {"question": pending.example.question,
            "passages": pending.evidence or pending.passages,
            "direct_answer": pending.direct_answer,
            "id": f"{pending.example.dataset}:{pending.example.id}", **given}


def _run_pending(
    tm: TrustMargin,
    store: ResultStore,
    pending: list[_Pending],
    *,
    batch_size: int,
    desc: str,
    progress: bool,
    on_chunk: ChunkCallback | None = None,
) -> list[str]:
    """Arbitrate what the store lacks of a run's items (all of them, stored or not: see
    :func:`~trustmargin_integrations.resumable.run_chunks`); return the keys computed."""

    short = short_answer_arbiter(tm)  # a noise run gives back the run's short Direct answers

    def arbitrate(chunk: Sequence[_Pending]) -> list[dict[str, Any]]:
        # A user's chain's texts (both given) are compared as chat answers under the
        # config's scoring form; the product's own short Direct answers are scored whole.
        decided: dict[int, Decision] = {}
        chain = [i for i, p in enumerate(chunk) if p.rag_answer is not None]
        own = [i for i, p in enumerate(chunk) if p.rag_answer is None]
        for arbiter, group in ((tm, chain), (short, own)):
            if not group:
                continue
            decisions = arbiter.arbitrate_batch([_input(chunk[i]) for i in group])
            decided.update(zip(group, decisions, strict=True))
        return [eval_value(decided[i], p.retrieval_s) for i, p in enumerate(chunk)]

    # The engine orders the work (a local model by length, so its batches pad little); the
    # durable chunks then follow that order.
    lengths = [len(p.example.question) + sum(len(t) for t in p.passages) for p in pending]
    ordered = [pending[i] for call in tm.backend.batches(lengths, batch_size) for i in call]
    return run_chunks(store, ordered, key=lambda p: p.key, compute=arbitrate,
                      batch_size=batch_size, desc=desc, progress=progress, on_chunk=on_chunk)


def run_eval(
    tm: TrustMargin,
    examples: Sequence[EvalExample],
    store: ResultStore,
    *,
    source: PassageSource,
    top_k: int,
    dtype: str | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    on_chunk: ChunkCallback | None = None,
) -> list[EvalRecord]:
    """Evaluate ``examples`` with ``tm``, computing only what the store does not hold yet.

    Args:
        tm: the arbiter (its backend generates and scores; its config sets the budgets).
        examples: questions with gold answers.
        store: the run's cache; finished examples are read from it, new ones appended.
        source: where passages come from (precomputed, BM25, Elasticsearch, ...).
        top_k: passages per question.
        dtype: the dtype name recorded in the cache key (default: the model's).
        batch_size: questions per model call (defaults to ``tm.config.batch_size``).
        progress: show a progress bar with ETA.
        on_chunk: called after each durable batch with (done, total pending).

    Returns:
        One :class:`EvalRecord` per example, in input order.
    """
    if top_k < 1:
        raise InvalidInputError("top_k", f"must be >= 1, got {top_k}", "use --top-k 1 or more")
    settings = settings_for(tm, top_k=top_k, dtype=dtype, retrieval=source.name)
    # A chain's texts are compared under the scoring form, which is part of their result.
    chain_settings = {**settings.as_dict(), "scoring_form": tm.config.scoring_form,
                      **form_prompts(tm.config.scoring_form)}
    fetched = source.fetch(examples, top_k)
    keyed = []
    for ex, (passages, seconds) in zip(examples, fetched, strict=True):
        # No passage is a legitimate outcome: the Decision records "no_evidence".
        texts = [p.as_context() for p in passages]
        direct, rag = (ex.chain.direct, ex.chain.rag) if ex.chain else (None, None)
        key = example_key(tm, chain_settings if ex.chain else settings.as_dict(), ex.question,
                          texts, direct, rag)
        keyed.append(_Pending(ex, key, texts, seconds, direct, list(passages), rag))
    computed = set(_run_pending(tm, store, list(keyed),
                                batch_size=batch_size or tm.config.batch_size, desc="eval",
                                progress=progress, on_chunk=on_chunk))
    return [read_eval_record(store, p.example, p.key, tuple(p.passages), p.key in computed)
            for p in keyed]


def cached_records(
    tm: TrustMargin,
    examples: Sequence[EvalExample],
    store: ResultStore,
    *,
    source: PassageSource,
    top_k: int,
    dtype: str | None = None,
) -> list[EvalRecord]:
    """The records of a finished run, read from the cache only (never computes).

    ``dtype`` selects which run's entries to read, e.g. the fp32 reference while ``tm`` holds
    the same model in bf16. Raises if any example is missing.
    """
    settings = settings_for(tm, top_k=top_k, dtype=dtype, retrieval=source.name)
    out = []
    for ex, (passages, _) in zip(examples, source.fetch(examples, top_k), strict=True):
        texts = [p.as_context() for p in passages]
        key = example_key(tm, settings.as_dict(), ex.question, texts, None)
        if key not in store:
            raise InvalidInputError(f"{ex.dataset}[{ex.id}]", "is not in the cache",
                                    "run the evaluation for it first")
        out.append(read_eval_record(store, ex, key, tuple(texts)))
    return out


# -- retrieval-noise robustness ------------------------------------------------------------


def inject_noise(
    passages: Sequence[str], pool: Sequence[str], n_replace: int, *, seed: int, example_id: str
) -> list[str]:
    """Replace ``n_replace`` of ``passages`` (seeded positions) with random pool passages.

    Deterministic for a given (seed, example_id, n_replace); replacements never repeat a
    passage already in the list.
    """
    if not 0 <= n_replace <= len(passages):
        raise InvalidInputError("n_replace", f"must be in 0..{len(passages)}, got {n_replace}",
                                "replace at most as many passages as were retrieved")
    rng = random.Random(f"{seed}:{example_id}:{n_replace}")
    present = set(passages)
    candidates = [p for p in pool if p not in present]
    if len(candidates) < n_replace:
        raise InvalidInputError("pool", f"has only {len(candidates)} usable passages",
                                "give a larger noise corpus")
    positions = sorted(rng.sample(range(len(passages)), n_replace))
    replacements = rng.sample(candidates, n_replace)
    out = list(passages)
    for pos, text in zip(positions, replacements, strict=True):
        out[pos] = text
    return out


def run_noise(
    tm: TrustMargin,
    records: Sequence[EvalRecord],
    store: ResultStore,
    *,
    pool: Sequence[str],
    levels: Sequence[int],
    seed: int,
    top_k: int,
    dtype: str | None = None,
    batch_size: int | None = None,
    progress: bool = True,
) -> list[NoiseRecord]:
    """Corrupt the passages of ``records`` at each level and re-run RAG generation + scoring.

    The Direct answer is held fixed (it never sees passages); level 0 reuses the main run's
    records. Results are cached like the main run, so this is resumable too.
    """
    settings = settings_for(tm, top_k=top_k, dtype=dtype, retrieval="noise")
    pending: list[_Pending] = []
    planned: list[tuple[EvalRecord, int, str]] = []
    for level in levels:
        for rec in records:
            if level == 0:
                planned.append((rec, 0, rec.key))
                continue
            noisy = inject_noise(rec.passages, pool, min(level, len(rec.passages)), seed=seed,
                                 example_id=f"{rec.example.dataset}:{rec.example.id}")
            direct = rec.decision.direct_answer
            key = example_key(tm, settings.as_dict(), rec.example.question, noisy, direct)
            planned.append((rec, level, key))
            # Every planned item, stored or not: chunks are fixed slices of the whole run.
            pending.append(_Pending(rec.example, key, noisy, 0.0, direct))
    _run_pending(tm, store, pending, batch_size=batch_size or tm.config.batch_size,
                 desc="noise", progress=progress)
    return [NoiseRecord(rec.example, 0, rec.decision, key) if level == 0
            else read_noise_record(store, rec.example, level, key)
            for rec, level, key in planned]
