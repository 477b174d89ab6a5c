"""GPU benchmark of TrustMargin on random-weight Llama-shaped models (runs on CPU too).

Nothing is downloaded: the model is a ``LlamaConfig`` with the shapes of Llama-3.2-1B or
Llama-3.1-8B (or a ``tiny`` shape for CPU checks) and random weights (seed 0); only its speed
and memory are meaningful, not its answers. The tokenizer is the embedded SmolLM2 one (or a
copied folder, ``--tokenizer DIR``), so the vocabulary is the tokenizer's (49152) unless
``--vocab-size`` asks for a larger one (Llama 3's is 128256). Questions and passages are real
2WikiMultihopQA questions with BM25 passages from the HippoRAG 2Wiki corpus, filled in rank
order to about ``--context-tokens`` (synthetic passages when the data folder is missing).

Measured (Markdown tables on stdout; ``--out FILE`` also writes them with the raw numbers as
JSON):

1. greedy decode per token at batch 1 after the RAG prompt: the model's own loop (prefill +
   N steps on a DynamicCache through ``HFBackend.prefill``/``greedy_steps``) and
   ``HFBackend.generate`` with its EOS stop switched off so that exactly N tokens are made
   (on the backend's default loop: the static-cache loop with a CUDA graph on CUDA);
1b. the decode loops compared (``benchmarks/decode_loops.py``, which also runs alone with
   only torch and transformers installed): the plain loop (DynamicCache) against the
   static-cache loop without and (CUDA) with a CUDA graph, ms per token at each
   ``--loop-batch-sizes`` value after random prompts of the RAG prompt's length;
2. per-question latency at batch 1: ``tm.arbitrate_batch`` (both candidates generated and
   six likelihoods) against Direct+RAG generation alone (two ``backend.generate`` calls);
3. throughput (questions/s, ``tm.prepare`` included) at each ``--batch-sizes`` value, with
   the same ratio against generation alone and the share of time spent in ``prepare``
   (2 and 3: one untimed run of both sides at the exact shapes, then the median of
   ``--repeats`` runs in alternating order);
4. the scoring share: ``Decision.timings.scoring_s / total_s`` over scored questions;
5. CUDA memory per measurement: peak allocated, reserved, and device-wide used memory
   (``mem_get_info`` total - free, so foreign allocations such as JAX's show);
6. faithfulness: the Decisions' six likelihoods against ``backend.score_continuations``
   (one plain forward pass per sequence), max |difference|; when the run dtype is not fp32
   the model is then upcast to fp32 and checked again (must be < 1e-4);
7. ``--growth N``: N batches of random size and context budget; allocated memory at start
   and end (no growth expected).

Usage::

    # CPU check (a few seconds)
    python benchmarks/gpu.py --device cpu --shape tiny --questions 4 --batch-sizes 1 4 \\
        --context-tokens 512
    # H100: Llama-3.2-1B shape, bf16, 2k contexts
    python benchmarks/gpu.py --shape 1b --context-tokens 2048 --batch-sizes 1 8 32 64 \\
        --growth 8 --out gpu-1b.json
    # copy the tokenizer to a folder for a machine without the embedded model package
    python benchmarks/gpu.py --save-tokenizer ./tokenizer-smollm2

Data: ``--data DIR`` (default ``$TRUSTMARGIN_DATA``, else ``../shared/data/raw`` next to the
repository) holding ``trustmargin/2wikimultihopqa_dev.json`` and
``hipporag/2wikimultihopqa_corpus.json``.

On a GPU machine with no network and no project install (torch and transformers present):
carry a git-ignored folder with the tokenizer (``--save-tokenizer``, 3.5 MB) and the two data
files (3.3 MB), plus wheels of pydantic, pydantic-core (for that machine's Python),
annotated-types, typing-inspection, bm25s and PyStemmer; install them with ``pip install
--no-index --no-deps --target /tmp/site WHEELS`` and ``PYTHONPATH=/tmp/site``, then run the
1B command above with ``--tokenizer DIR --data DIR`` (and the same with ``--shape 8b``, as a
separate call: each shape takes several minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import transformers

# Run from a plain checkout (package not installed): the repository root holds the package.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.retrieval import BM25Index, load_corpus
from trustmargin_integrations.schema import Decision, Passage

sys.path.insert(1, str(Path(__file__).resolve().parent))
from contexts import fill
from decode_loops import (
    DTYPES,
    SHAPES,
    Clock,
    best_times,
    build_model,
    device_arguments,
    device_name,
    forced_length,
    load_tokenizer,
    loops_table,
    measure_loops,
)

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("TRUSTMARGIN_DATA") or REPO.parent / "shared" / "data" / "raw")
QUESTIONS_FILE = Path("trustmargin") / "2wikimultihopqa_dev.json"
CORPUS_FILE = Path("hipporag") / "2wikimultihopqa_corpus.json"
VIEWS = ("question_only", "question_context", "context_only")
GB = 1024**3



# -- setup ----------------------------------------------------------------------------------


def synthetic_data(n: int, seed: int = 0) -> tuple[list[dict[str, str]], list[Passage]]:
    """Made-up questions and a made-up corpus (used only when the 2Wiki files are missing)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ren", "sa", "tor", "vel", "an", "bri", "du", "es", "fo"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(600)]
    names = [w.capitalize() for w in words[:300]]
    corpus = []
    for i in range(2000):
        title = f"{rng.choice(names)} {rng.choice(names)}"
        text = " ".join(rng.choice(words + names) for _ in range(rng.randint(40, 90))) + "."
        corpus.append(Passage(id=str(i), title=title, text=text))
    records = []
    for _ in range(n):
        subject = rng.choice(corpus)
        records.append({"question": f"Who founded {subject.title} and where was the founder "
                                    "born?", "answer": rng.choice(names)})
    return records, corpus


def load_items(backend: HFBackend, data: Path, n: int, size: int
               ) -> tuple[list[dict[str, Any]], str]:
    """``n`` arbitration inputs (question, answer, passages filled to ``size`` tokens)."""
    questions, corpus = data / QUESTIONS_FILE, data / CORPUS_FILE
    if questions.is_file() and corpus.is_file():
        records = json.loads(questions.read_text(encoding="utf-8"))[:n]
        passages = load_corpus(corpus)
        source = (f"2WikiMultihopQA: {len(records)} dev questions, BM25 over the HippoRAG "
                  f"2Wiki corpus ({len(passages)} passages) from {data}")
    else:
        records, passages = synthetic_data(n)
        source = (f"SYNTHETIC passages and questions ({data} has no {QUESTIONS_FILE} and "
                  f"{CORPUS_FILE})")
    index = BM25Index.build(passages)
    items = [{"id": str(i), "question": r["question"], "answer": str(r.get("answer", "")),
              "passages": fill(backend, index, r["question"], size)}
             for i, r in enumerate(records)]
    return items, source


def as_input(item: dict[str, Any], **given: str) -> dict[str, Any]:
    """The arbitration input of an item (the gold answer is not passed on)."""
    return {"id": item["id"], "question": item["question"], "passages": item["passages"],
            **given}


# -- timing and memory ----------------------------------------------------------------------


@dataclass
class Memory:
    """CUDA memory probes (``None`` on CPU)."""

    device: torch.device

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)

    def read(self) -> dict[str, float] | None:
        if not self.cuda:
            return None
        torch.cuda.synchronize(self.device)
        free, total = torch.cuda.mem_get_info(self.device)
        return {"peak_allocated_gb": torch.cuda.max_memory_allocated(self.device) / GB,
                "reserved_gb": torch.cuda.memory_reserved(self.device) / GB,
                "device_used_gb": (total - free) / GB, "device_total_gb": total / GB}

    def allocated_gb(self) -> float | None:
        if not self.cuda:
            return None
        gc.collect()
        torch.cuda.synchronize(self.device)
        return torch.cuda.memory_allocated(self.device) / GB


def rss_gb() -> float | None:
    """Resident memory of this process (Linux), for the CPU growth check."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / GB


# -- measurements ---------------------------------------------------------------------------


def model_decode(backend: HFBackend, prompt: list[int], new_tokens: int) -> int:
    """Prefill ``prompt`` and greedily decode ``new_tokens`` tokens with the backend's
    public ``prefill``/``step`` (mask, positions, DynamicCache, one host sync per step) and
    no stop checks at all. Returns the number of tokens made."""
    batch = backend.prefill([prompt])
    made = 0
    for tokens in backend.greedy_steps(batch, new_tokens):
        tokens.tolist()  # the host sync greedy decoding makes at every step
        made += 1
    return made


def measure_decode(backend: HFBackend, clock: Clock, prompt: str, steps: int,
                   repeats: int) -> dict[str, Any]:
    """Per-token decode time at batch 1: (t(N tokens) - t(1 token)) / (N - 1)."""
    ids = backend.encode_prompt(prompt)
    steps = max(2, steps)
    one, many = best_times(clock, [lambda: model_decode(backend, ids, 1),
                                   lambda: model_decode(backend, ids, steps)], repeats)
    with forced_length(backend):
        made = len(backend.greedy([ids], steps).tokens[0])
        loop = backend.decoding.last_decode_loop
        b_one, b_many = best_times(clock, [lambda: backend.generate([prompt], 1),
                                           lambda: backend.generate([prompt], steps)], repeats)
    return {"prompt_tokens": len(ids), "new_tokens": steps, "backend_tokens_made": made,
            "prefill_s": one, "model_per_token_s": (many - one) / (steps - 1),
            "backend_per_token_s": (b_many - b_one) / (steps - 1), "backend_loop": loop,
            "repeats": repeats}


def generation_only(backend: HFBackend, tm: TrustMargin, prepared: list[Any],
                    batch: int) -> None:
    """Direct + RAG greedy generation alone, batched and length-sorted as the arbiter does."""
    order = sorted(prepared, key=lambda p: len(p.views.question_context))
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        backend.generate([p.views.question_only for p in chunk], tm.config.max_new_tokens,
                         stop=answer_complete)
        backend.generate([p.views.question_context for p in chunk], tm.config.max_new_tokens,
                         stop=answer_complete)


def decision_stats(decisions: Sequence[Decision]) -> dict[str, Any]:
    """Scored count, scoring share and the in-run ratio from the Decisions' own timings."""
    scored = [d for d in decisions if d.direct_likelihoods is not None]
    shares = [d.timings.scoring_s / d.timings.total_s for d in scored if d.timings.total_s > 0]
    total = sum(d.timings.total_s for d in decisions)
    generation = sum(d.timings.generate_direct_s + d.timings.generate_rag_s for d in decisions)
    return {"scored": len(scored), "questions": len(decisions),
            "scoring_share": statistics.mean(shares) if shares else None,
            "in_run_ratio": total / generation if generation > 0 else None,
            "context_tokens_mean": statistics.mean(d.context_tokens for d in decisions),
            "unscored_reasons": sorted({d.reason for d in decisions
                                        if d.direct_likelihoods is None})}


def paired_times(clock: Clock, trustmargin: Callable[[], T], generation: Callable[[], object],
                 repeats: int) -> tuple[list[float], list[float], T]:
    """Seconds of ``repeats`` timed runs of each function, and the last TrustMargin result.

    One untimed run of both comes first: the first use of a batch/sequence shape on CUDA is
    slow (kernel selection, caching-allocator growth), and a TrustMargin run timed cold took
    3-4x longer than the same generation timed right after it. The timed runs then alternate
    the order (generation, TrustMargin, TrustMargin, generation, ...) so that neither side
    always goes first.
    """
    generation()
    out = trustmargin()
    tm_times: list[float] = []
    gen_times: list[float] = []
    for r in range(repeats):
        if r % 2 == 0:
            gen_times.append(clock.time(generation)[0])
        seconds, out = clock.time(trustmargin)
        tm_times.append(seconds)
        if r % 2 == 1:
            gen_times.append(clock.time(generation)[0])
    return tm_times, gen_times, out


def measure_latency(backend: HFBackend, clock: Clock, memory: Memory, items: list[dict],
                    context: int, repeats: int) -> tuple[dict[str, Any], list[Decision]]:
    """Batch-1 seconds per question: arbitrate_batch vs Direct+RAG generation alone (the
    median of ``repeats`` warm runs per question, averaged over the questions)."""
    tm = TrustMargin(backend, TrustMarginConfig(batch_size=1, max_context_tokens=context))
    tm_times, gen_times, decisions = [], [], []
    memory.reset()
    for item in items:
        prepared = [tm.prepare(as_input(item))]
        tm_runs, gen_runs, out = paired_times(
            clock, lambda item=item: tm.arbitrate_batch([as_input(item)]),
            lambda p=prepared: generation_only(backend, tm, p, 1), repeats)
        tm_times.append(statistics.median(tm_runs))
        gen_times.append(statistics.median(gen_runs))
        decisions.extend(out)
    tm_s, gen_s = statistics.mean(tm_times), statistics.mean(gen_times)
    return ({"trustmargin_s": tm_s, "generation_s": gen_s, "ratio": tm_s / gen_s,
             "repeats": repeats, "trustmargin_per_question_s": tm_times,
             "generation_per_question_s": gen_times,
             "memory": memory.read(), **decision_stats(decisions)}, decisions)


def measure_throughput(backend: HFBackend, clock: Clock, memory: Memory, items: list[dict],
                       batch: int, context: int, repeats: int
                       ) -> tuple[dict[str, Any], list[Decision]]:
    """Questions/s of arbitrate_batch (prepare included) and of generation alone at one B
    (median of ``repeats`` warm runs each; memory: peak over both, i.e. TrustMargin's)."""
    tm = TrustMargin(backend, TrustMarginConfig(batch_size=batch, max_context_tokens=context))
    inputs = [as_input(item) for item in items]
    prepared = tm.prepare_batch(inputs)
    memory.reset()
    tm_runs, gen_runs, decisions = paired_times(
        clock, lambda: tm.arbitrate_batch(inputs),
        lambda: generation_only(backend, tm, prepared, batch), repeats)
    mem = memory.read()
    prep_s, _ = clock.time(lambda: tm.prepare_batch(inputs))
    tm_s, gen_s = statistics.median(tm_runs), statistics.median(gen_runs)
    n = len(inputs)
    return ({"batch_size": batch, "questions": n, "trustmargin_s": tm_s,
             "trustmargin_qps": n / tm_s, "generation_s": gen_s, "generation_qps": n / gen_s,
             "ratio": tm_s / gen_s, "prepare_s": prep_s, "prepare_share": prep_s / tm_s,
             "repeats": repeats, "trustmargin_runs_s": tm_runs, "generation_runs_s": gen_runs,
             "memory": mem, **decision_stats(decisions)}, decisions)


Reference = dict[tuple[str, str], float]


def agreement(backend: HFBackend, context: int, items: list[dict], decisions: list[Decision],
              limit: int, reference: Reference) -> dict[str, Any]:
    """Max |fast - plain| over the six likelihoods of up to ``limit`` scored Decisions.

    ``reference`` memoizes the plain scores by (prompt, answer) across calls.
    """
    tm = TrustMargin(backend, TrustMarginConfig(max_context_tokens=context))
    by_id = {item["id"]: item for item in items}
    diffs, compared = [], 0
    for d in decisions:
        if compared >= limit:
            break
        if d.direct_likelihoods is None or d.rag_likelihoods is None:
            continue
        views = tm.prepare(as_input(by_id[d.id])).views
        for answer, lik in ((d.direct_answer, d.direct_likelihoods),
                            (d.rag_answer, d.rag_likelihoods)):
            keys = [(getattr(views, v), answer) for v in VIEWS]
            todo = [k for k in keys if k not in reference]
            scores = backend.score_continuations([ContinuationRequest(*k) for k in todo])
            reference.update((k, ref.mean) for k, ref in zip(todo, scores, strict=True))
            diffs += [abs(getattr(lik, view) - reference[key])
                      for view, key in zip(VIEWS, keys, strict=True)]
        compared += 1
    return {"questions": compared, "likelihoods": len(diffs),
            "max_abs_diff": max(diffs) if diffs else None}


def given_candidates(backend: HFBackend, context: int, items: list[dict], batch: int,
                     limit: int) -> tuple[list[Decision], list[dict]]:
    """Decisions with both candidates given (scoring prefills the prompts itself)."""
    chosen = items[:limit]
    # Short answers given back: scored whole, the paper's way (the "paper" form), so the
    # plain reference scores the same texts.
    tm = TrustMargin(backend, TrustMarginConfig(batch_size=batch, max_context_tokens=context,
                                                scoring_form="paper"))
    inputs = [as_input(item, direct_answer=item["answer"] or "unknown",
                       rag_answer="none of the passages") for item in chosen]
    return tm.arbitrate_batch(inputs), chosen


def check_agreement(backend: HFBackend, context: int, items: list[dict],
                    runs: dict[str, list[Decision]], batch: int, limit: int
                    ) -> dict[str, dict[str, Any]]:
    """Fast-path likelihoods vs the plain reference for each set of Decisions."""
    reference: Reference = {}
    out = {name: agreement(backend, context, items, decisions, limit, reference)
           for name, decisions in runs.items()}
    given, chosen = given_candidates(backend, context, items, batch, limit)
    out[f"candidates given, batch {batch}"] = agreement(backend, context, chosen, given, limit,
                                                        reference)
    return out


def measure_growth(backend: HFBackend, memory: Memory, items: list[dict], runs: int,
                   max_batch: int, context: int, seed: int = 0) -> dict[str, Any]:
    """Allocated memory before and after ``runs`` differently shaped batches."""
    rng = random.Random(seed)
    if memory.cuda:
        torch.cuda.empty_cache()
    start, start_rss = memory.allocated_gb(), rss_gb()
    shapes, after = [], []
    for _ in range(runs):
        size = rng.randint(1, min(max_batch, len(items)))
        budget = rng.randint(min(64, context), context)
        tm = TrustMargin(backend, TrustMarginConfig(batch_size=size, max_context_tokens=budget))
        tm.arbitrate_batch([as_input(item) for item in rng.sample(items, size)])
        shapes.append({"batch_size": size, "max_context_tokens": budget})
        after.append(memory.allocated_gb())
    if memory.cuda:
        torch.cuda.empty_cache()
    end, end_rss = memory.allocated_gb(), rss_gb()
    grew = None if start is None or end is None else end - start
    return {"runs": runs, "shapes": shapes, "allocated_start_gb": start,
            "allocated_end_gb": end, "allocated_after_each_gb": after,
            "allocated_growth_gb": grew, "rss_start_gb": start_rss, "rss_end_gb": end_rss}


# -- report ---------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".3f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def mem_cells(mem: dict[str, float] | None) -> list[str]:
    if mem is None:
        return ["n/a", "n/a", "n/a"]
    return [f"{mem['peak_allocated_gb']:.2f}", f"{mem['reserved_gb']:.2f}",
            f"{mem['device_used_gb']:.2f}"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def render(results: dict[str, Any]) -> str:
    meta, dec, lat = results["meta"], results["decode"], results["latency"]
    parts = [
        f"## TrustMargin benchmark: random-weight `{meta['shape']}` "
        f"({meta['parameters'] / 1e9:.2f} B parameters)",
        f"device: {meta['device_name']} | torch {meta['torch']} | transformers "
        f"{meta['transformers']} | dtype {meta['dtype']} | vocab {meta['vocab_size']} | "
        f"context target {meta['context_tokens']} tokens (mean used "
        f"{meta['context_tokens_used']:.0f}) | {meta['questions']} questions | "
        f"max_new_tokens {meta['max_new_tokens']}",
        f"data: {meta['data']}",
        f"weights: {fmt(meta['weights_allocated_gb'], '.2f', ' GB')} allocated after loading",
        "",
        f"### 1. Greedy decode at batch 1 (RAG prompt of {dec['prompt_tokens']} tokens, "
        f"N = {dec['new_tokens']}, best of {dec['repeats']}; per token = (t(N) - t(1)) / "
        "(N - 1))",
        "",
        table(["measure", "ms"], [
            ["prefill + first token", f"{1e3 * dec['prefill_s']:.2f}"],
            ["per token, model loop (prefill + N steps, DynamicCache)",
             f"{1e3 * dec['model_per_token_s']:.2f}"],
            [f"per token, HFBackend.generate (EOS stop off, no stop predicate; loop: "
             f"{dec['backend_loop']})", f"{1e3 * dec['backend_per_token_s']:.2f}"],
        ]),
        "",
        f"### 1b. Decode loops (random prompts of {dec['prompt_tokens']} tokens, the next "
        "rows 7 tokens shorter each; best of "
        f"{dec['repeats']}; per token = (t(N) - t(1)) / (N - 1))",
        "",
        loops_table(results["decode_loops"], meta["shape"]),
        "",
        f"### 2. Latency per question at batch 1 (after one untimed run of each, median of "
        f"{lat['repeats']} alternating runs)",
        "",
        table(["path", "s / question", "peak alloc GB", "reserved GB", "device used GB"], [
            ["TrustMargin arbitrate_batch (generate both + six likelihoods)",
             f"{lat['trustmargin_s']:.4f}", *mem_cells(lat["memory"])],
            ["Direct + RAG generation alone", f"{lat['generation_s']:.4f}", "", "", ""],
            ["ratio TrustMargin / generation", f"{lat['ratio']:.2f}x", "", "", ""],
            ["ratio in-run (Decision timings: total / own generation)",
             f"{fmt(lat['in_run_ratio'], '.2f', 'x')}", "", "", ""],
        ]),
        "",
        f"scored {lat['scored']}/{lat['questions']}"
        + (f" (unscored: {', '.join(lat['unscored_reasons'])})" if lat["unscored_reasons"]
           else "")
        + f"; scoring share {fmt(lat['scoring_share'] and 100 * lat['scoring_share'], '.1f', '%')}"
        " (Decision.timings.scoring_s / total_s, mean over scored questions)",
        "",
        "### 3-5. Throughput by batch size (prepare included; after one untimed run of each, "
        f"median of {lat['repeats']} alternating runs; memory of the TrustMargin run)",
        "",
        table(["batch", "questions", "TrustMargin q/s", "generation q/s",
               "TM / generation time", "in-run TM / own generation", "prepare share",
               "scoring share", "scored", "peak alloc GB", "reserved GB", "device used GB"],
              [[str(r["batch_size"]), str(r["questions"]), f"{r['trustmargin_qps']:.2f}",
                f"{r['generation_qps']:.2f}", f"{r['ratio']:.2f}x",
                fmt(r["in_run_ratio"], ".2f", "x"),
                f"{100 * r['prepare_share']:.1f}%",
                fmt(r["scoring_share"] and 100 * r["scoring_share"], ".1f", "%"),
                f"{r['scored']}/{r['questions']}", *mem_cells(r["memory"])]
               for r in results["throughput"]]),
        "",
        "### 6. Faithfulness: fast path vs plain reference (`score_continuations`)",
        "",
        table(["dtype", "decisions from", "questions", "likelihoods", "max |diff|"],
              [[row["dtype"], row["set"], str(row["questions"]), str(row["likelihoods"]),
                fmt(row["max_abs_diff"], ".2e")] for row in results["agreement"]]),
    ]
    growth = results.get("growth")
    if growth:
        sizes = ", ".join(f"{s['batch_size']}x{s['max_context_tokens']}"
                          for s in growth["shapes"])
        parts += [
            "",
            f"### 7. Memory growth over {growth['runs']} differently shaped batches "
            "(batch x context budget)",
            "",
            f"shapes: {sizes}",
            "",
            table(["measure", "start", "end", "growth"], [
                ["CUDA allocated GB", fmt(growth["allocated_start_gb"], ".4f"),
                 fmt(growth["allocated_end_gb"], ".4f"),
                 fmt(growth["allocated_growth_gb"], "+.4f")],
                ["process RSS GB (host)", fmt(growth["rss_start_gb"], ".3f"),
                 fmt(growth["rss_end_gb"], ".3f"),
                 "n/a" if growth["rss_start_gb"] is None or growth["rss_end_gb"] is None
                 else f"{growth['rss_end_gb'] - growth['rss_start_gb']:+.3f}"],
            ]),
        ]
    return "\n".join(parts)


_STARTED = time.perf_counter()


def log(message: str) -> None:
    """Progress on stderr (the tables go to stdout)."""
    print(f"[gpu.py {time.perf_counter() - _STARTED:7.1f}s] {message}", file=sys.stderr,
          flush=True)


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = device_arguments((__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--questions", type=int, default=8,
                        help="questions per measurement (a batch size B above it runs B)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--context-tokens", type=int, default=2048)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--loop-batch-sizes", type=int, nargs="+", default=[1, 8],
                        help="batch sizes of the decode-loop comparison (1b)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed repeats: best of for decode, median (after one untimed "
                        "run) for latency and throughput")
    parser.add_argument("--growth", type=int, default=0)
    parser.add_argument("--agreement-questions", type=int, default=4)
    parser.add_argument("--no-fp32-check", action="store_true",
                        help="skip the agreement check after upcasting a bf16 model to fp32")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="default: the tokenizer's size (Llama 3 has 128256)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer folder (default: the embedded SmolLM2 model's)")
    parser.add_argument("--save-tokenizer", default=None, metavar="DIR",
                        help="write the tokenizer to DIR and exit")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if (min(args.batch_sizes + args.loop_batch_sizes) < 1 or min(args.questions, args.repeats) < 1
            or args.context_tokens < 64):
        parser.error("batch sizes, --questions and --repeats must be >= 1, "
                     "--context-tokens >= 64")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every measurement, print the tables and return the results (also --out JSON)."""
    args = parse_args(argv)
    tokenizer, tokenizer_dir = load_tokenizer(args.tokenizer)
    if args.save_tokenizer:
        tokenizer.save_pretrained(args.save_tokenizer)
        print(f"tokenizer of {tokenizer_dir} written to {args.save_tokenizer}")
        return {"tokenizer": args.save_tokenizer}
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    vocab = args.vocab_size or len(tokenizer)
    if vocab < len(tokenizer):
        raise SystemExit(f"--vocab-size {vocab} is below the tokenizer's {len(tokenizer)}")
    clock, memory = Clock(device), Memory(device)

    log(f"building random-weight {args.shape} ({dtype}) on {device}")
    model = build_model(args.shape, vocab, tokenizer, dtype, device)
    backend = HFBackend(model, tokenizer, model_id=f"random-{args.shape}")
    weights_gb = memory.allocated_gb()
    context = args.context_tokens
    pool = max(args.questions, *args.batch_sizes)
    log(f"loading {pool} questions and filling contexts to {context} tokens")
    items, source = load_items(backend, args.data, pool, context)
    base = items[:args.questions]

    log("warm-up")
    # One untimed pass at batch 1 (lazy initialisation); the latency and throughput
    # measurements warm up each of their own shapes (paired_times).
    top = max(args.batch_sizes)
    warm = TrustMargin(backend, TrustMarginConfig(batch_size=1, max_context_tokens=context))
    warm.arbitrate_batch([as_input(base[0])])
    rag_prompt = warm.prepare(as_input(base[0])).views.question_context
    model_decode(backend, backend.encode_prompt(rag_prompt), 2)

    log("1. decode")
    decode = measure_decode(backend, clock, rag_prompt, args.decode_tokens, args.repeats)
    log("1b. decode loops")
    loops = measure_loops(backend, clock, args.loop_batch_sizes, decode["prompt_tokens"],
                          args.decode_tokens, args.repeats)
    log("2. batch-1 latency")
    latency, latency_decisions = measure_latency(backend, clock, memory, base, context,
                                                 args.repeats)
    throughput, by_batch = [], {}
    for batch in args.batch_sizes:
        log(f"3. throughput at batch {batch}")
        row, by_batch[batch] = measure_throughput(
            backend, clock, memory, items[:max(batch, args.questions)], batch, context,
            args.repeats)
        throughput.append(row)
    if args.growth:
        log(f"7. growth over {args.growth} batches")
    growth = (measure_growth(backend, memory, items, args.growth, top, context)
              if args.growth else None)

    # Faithfulness: batch-1 Decisions, largest-batch Decisions (left padding), given candidates.
    limit = args.agreement_questions
    log("6. agreement with the plain reference")
    runs = {"generated, batch 1": latency_decisions}
    if top > 1:
        runs[f"generated, batch {top}"] = by_batch[top]
    checks = [{"dtype": str(dtype).removeprefix("torch."), "set": name, **row}
              for name, row in check_agreement(backend, context, items, runs, top,
                                               limit).items()]
    if dtype != torch.float32 and not args.no_fp32_check:
        # Upcast in place and check again on a few questions: fp32 must agree to < 1e-4.
        if memory.cuda:
            gc.collect()
            torch.cuda.empty_cache()
        log("6. agreement after upcasting to fp32")
        backend.model.to(torch.float32)
        few = [as_input(item) for item in items[:limit]]
        small = min(top, limit)
        fp32_runs = {}
        for batch in sorted({1, small}):
            tm32 = TrustMargin(backend, TrustMarginConfig(batch_size=batch,
                                                          max_context_tokens=context))
            fp32_runs[f"generated, batch {batch}"] = tm32.arbitrate_batch(few)
        checks += [{"dtype": "float32 (upcast)", "set": name, **row}
                   for name, row in check_agreement(backend, context, items, fp32_runs, small,
                                                    limit).items()]

    results: dict[str, Any] = {
        "meta": {"device": str(device), "device_name": device_name(device),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "python": sys.version.split()[0],
                 "dtype": str(dtype).removeprefix("torch."), "shape": args.shape,
                 "config": SHAPES[args.shape], "vocab_size": vocab,
                 "parameters": sum(p.numel() for p in model.parameters()),
                 "tokenizer": tokenizer_dir, "context_tokens": context,
                 "context_tokens_used": latency["context_tokens_mean"],
                 "questions": len(base), "batch_sizes": args.batch_sizes,
                 "max_new_tokens": TrustMarginConfig().max_new_tokens,
                 "data": source, "synthetic": source.startswith("SYNTHETIC"),
                 "weights_allocated_gb": weights_gb},
        "decode": decode, "decode_loops": loops, "latency": latency, "throughput": throughput,
        "agreement": checks, "growth": growth,
    }
    results["tables"] = render(results)
    print(results["tables"])
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
