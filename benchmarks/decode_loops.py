"""Greedy decode loops compared: the plain loop (DynamicCache) against the static-cache loop,
with and without a CUDA graph, in ms per token on random-weight Llama-shaped models.

Light on purpose: it needs only torch, transformers and ``trustmargin_integrations.backends.hf``
(no pydantic, no retrieval, no data files), so it runs on a GPU machine that has nothing else
installed; ``benchmarks/gpu.py`` runs the same measurement as part of its full benchmark and
takes its model shapes and timing helpers from here.

Each batch row is a prompt of random token ids (seed 0), ``--prompt-tokens`` long for the
first row and a few tokens shorter for each next one (so the batch is left-padded). A run is
``HFBackend.greedy`` with EOS switched off and no stop predicate, so exactly N tokens are made;
per token = (t(N tokens) - t(1 token)) / (N - 1), best of ``--repeats`` interleaved runs after
one untimed run of each. The static loop's one-off costs per call (copying the prompts' cache
into its buffers, the warm-up step and the graph capture) are inside t(N), spread over N - 1.

Usage::

    # CPU check (the static loop runs without a graph)
    python benchmarks/decode_loops.py --device cpu --shapes tiny --prompt-tokens 256 \\
        --batch-sizes 1 2 --new-tokens 8
    # GPU: both shapes, batch 1 and 8, 2k-token prompts (tokenizer folder from
    # ``python benchmarks/gpu.py --save-tokenizer DIR`` on a machine without the package's
    # embedded model)
    python benchmarks/decode_loops.py --shapes 1b 8b --batch-sizes 1 8 --tokenizer DIR \\
        --out decode.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import torch
import transformers

# Run from a plain checkout (package not installed): the repository root holds the package.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from trustmargin_integrations.backends.hf import HFBackend

T = TypeVar("T")

# Llama-3.2-1B and Llama-3.1-8B shapes (vocabulary: the tokenizer's unless asked otherwise).
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 1024,
             "max_position_embeddings": 8192, "tie_word_embeddings": True},
    "1b": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 8192,
           "max_position_embeddings": 131072, "tie_word_embeddings": True},
    "8b": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336,
           "max_position_embeddings": 131072, "tie_word_embeddings": False},
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# The loops compared: (name, static_decode, cuda_graphs). The graph row only on CUDA.
LOOPS = (("plain (DynamicCache)", False, False), ("static cache", True, False),
         ("static cache + CUDA graph", True, True))


def load_tokenizer(directory: str | None) -> tuple[Any, str]:
    """The tokenizer of ``directory``, or of the embedded SmolLM2 model."""
    from transformers import AutoTokenizer

    if directory is None:
        from trustmargin_integrations.model_store import resolve_model

        _, path = resolve_model("smollm2-135m")
        directory = str(path)
    return AutoTokenizer.from_pretrained(directory), directory


def build_model(shape: str, vocab_size: int, tokenizer: Any, dtype: torch.dtype,
                device: torch.device) -> Any:
    """A random-weight causal LM of the given shape, built directly on ``device`` (seed 0)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(vocab_size=vocab_size, rope_theta=500000.0,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, **SHAPES[shape])
    # transformers 5 calls the argument ``dtype``; 4.x calls it ``torch_dtype``.
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", **{key: dtype})
    return model.to(device=device, dtype=dtype).eval()


@dataclass
class Clock:
    """Wall-clock timing that waits for the device before reading the clock."""

    device: torch.device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], T]) -> tuple[float, T]:
        self.sync()
        start = time.perf_counter()
        out = fn()
        self.sync()
        return time.perf_counter() - start, out


def best_times(clock: Clock, fns: Sequence[Callable[[], object]], repeats: int) -> list[float]:
    """Best-of-``repeats`` seconds of each function, run interleaved (noise only adds time)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], clock.time(fn)[0])
    return best


@contextmanager
def forced_length(backend: HFBackend) -> Iterator[None]:
    """Switch off HFBackend's EOS stop (``generate`` without ``stop`` has no other) so that
    exactly the asked number of tokens is made."""
    loaded = replace(backend.decoding.loaded, eos_token_ids=frozenset())
    with mock.patch.object(backend.decoding, "loaded", loaded):
        yield


def random_prompts(vocab: int, rows: int, length: int, seed: int = 0) -> list[list[int]]:
    """``rows`` prompts of random token ids, each 7 tokens shorter than the one before."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(max(1, length - 7 * r))] for r in range(rows)]


def measure_loops(backend: HFBackend, clock: Clock, batch_sizes: Sequence[int],
                  prompt_tokens: int, new_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """ms per token of every loop at each batch size, and whether the loops made the same
    tokens as the plain one."""
    cuda = backend.device.type == "cuda"
    loops = [loop for loop in LOOPS if cuda or not loop[2]]
    vocab = backend.model.config.vocab_size
    new_tokens = max(2, new_tokens)
    rows = []
    for batch in batch_sizes:
        prompts = random_prompts(vocab, batch, prompt_tokens)
        reference: list[list[int]] | None = None
        for name, static, graphs in loops:
            row: dict[str, Any] = {"batch_size": batch, "loop": name, "rows": batch,
                                   "prompt_tokens": max(len(p) for p in prompts),
                                   "new_tokens": new_tokens, "repeats": repeats}
            try:
                with mock.patch.multiple(backend.decoding, static_decode=static,
                                         cuda_graphs=graphs), \
                        forced_length(backend):
                    made = backend.greedy(prompts, new_tokens)  # untimed: warms this shape
                    row["loop_used"] = backend.decoding.last_decode_loop
                    one, many = best_times(
                        clock, [lambda p=prompts: backend.greedy(p, 1),
                                lambda p=prompts: backend.greedy(p, new_tokens)], repeats)
            except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
                # One failing loop (a GPU run is one shot) still leaves the others' numbers.
                rows.append({**row, "loop_used": f"failed: {type(exc).__name__}: {exc}"})
                continue
            reference = reference if reference is not None else made.tokens
            row.update(prefill_s=one, total_s=many, per_token_s=(many - one) / (new_tokens - 1),
                       rows_same_tokens_as_plain=sum(
                           a == b for a, b in zip(made.tokens, reference, strict=True)))
            rows.append(row)
    for row in rows:
        plain = next(r for r in rows if r["batch_size"] == row["batch_size"]
                     and r["loop"] == LOOPS[0][0])
        if "per_token_s" in row and "per_token_s" in plain:
            row["speedup_vs_plain"] = plain["per_token_s"] / row["per_token_s"]
    return rows


def loops_table(rows: Sequence[dict[str, Any]], shape: str | None = None) -> str:
    """The Markdown table of :func:`measure_loops`' rows."""
    header = ["shape", "batch", "loop", "ran as", "prompt tokens", "N", "prefill + 1st ms",
              "ms / token", "speed-up vs plain", "rows with the plain loop's tokens"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        measured = "per_token_s" in r
        cells = [r.get("shape", shape or ""), str(r["batch_size"]), r["loop"], r["loop_used"],
                 str(r["prompt_tokens"]), str(r["new_tokens"]),
                 f"{1e3 * r['prefill_s']:.1f}" if measured else "-",
                 f"{1e3 * r['per_token_s']:.2f}" if measured else "-",
                 f"{r['speedup_vs_plain']:.2f}x" if "speedup_vs_plain" in r else "-",
                 f"{r['rows_same_tokens_as_plain']}/{r['rows']}" if measured else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU and its thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def device_arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the ``--device`` and ``--dtype`` options both benchmarks take."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", choices=["cpu", "cuda"],
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="default: bfloat16 on cuda, float32 on cpu")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = device_arguments((__doc__ or "").splitlines()[0])
    parser.add_argument("--shapes", choices=sorted(SHAPES), nargs="+", default=["1b", "8b"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-tokens", type=int, default=2151,
                        help="longest prompt (default: the 2k-context RAG prompt's length)")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="default: the tokenizer's size (Llama 3 has 128256)")
    parser.add_argument("--tokenizer", default=None,
                        help="tokenizer folder (default: the embedded SmolLM2 model's)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the table (FILE.md) and raw numbers (FILE) here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if min(args.batch_sizes) < 1 or args.repeats < 1 or args.prompt_tokens < 8:
        parser.error("batch sizes and --repeats must be >= 1, --prompt-tokens >= 8")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Measure every loop for every shape, print the table and return the results."""
    args = parse_args(argv)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    tokenizer, tokenizer_dir = load_tokenizer(args.tokenizer)
    vocab = args.vocab_size or len(tokenizer)
    clock = Clock(device)
    rows: list[dict[str, Any]] = []
    for shape in args.shapes:
        print(f"[decode_loops] {shape}: building random weights ({dtype}) on {device}",
              file=sys.stderr, flush=True)
        model = build_model(shape, vocab, tokenizer, dtype, device)
        backend = HFBackend(model, tokenizer, model_id=f"random-{shape}")
        for row in measure_loops(backend, clock, args.batch_sizes, args.prompt_tokens,
                                 args.new_tokens, args.repeats):
            rows.append({"shape": shape, **row})
            print(f"[decode_loops] {shape} batch {row['batch_size']} {row['loop']} "
                  f"({row['loop_used']}): {1e3 * row.get('per_token_s', float('nan')):.2f} "
                  "ms/token", file=sys.stderr, flush=True)
        del backend, model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    meta = {"device": str(device), "device_name": device_name(device),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": sys.version.split()[0], "dtype": str(dtype).removeprefix("torch."),
            "vocab_size": vocab, "tokenizer": tokenizer_dir, "repeats": args.repeats}
    table = (f"## Decode loops: {meta['device_name']}, torch {meta['torch']}, transformers "
             f"{meta['transformers']}, {meta['dtype']}, vocab {vocab}, random weights\n\n"
             + loops_table(rows))
    print(table)
    results = {"meta": meta, "rows": rows, "table": table}
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        args.out.with_suffix(".md").write_text(table + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
