"""What arbitrating two chat texts costs: seconds per question at batch 8 for given texts, under
the code on PYTHONPATH, so that two versions of the package can be timed on the same inputs in
one session (run it once per version, interleaved, and compare the ratio).

The inputs are the model's own strict disagreements among the first questions of the shared
dev sets, each wrapped in chat framings (the same framing on both sides, and a closed-book
framing against a RAG framing), as a chain's two answers would be. The framings are written
here, not imported, so that any version of the package runs the same texts.

``--pairs all`` wraps each disagreement in every framing: the questions' prompts (the paper's
views, passages included) are then shared by six pairs and paid once, so what differs between
forms weighs more than in a chain. ``--pairs one`` gives each question one framing, in turn,
as a chain arbitrates one pair per question: a Decision's time as a user pays it.

``--texts FILE`` times long chat answers instead: the saved generations of
``benchmarks/longform.py --save-texts`` (a chain's two answers restating the question, as
Qwen2.5-Coder-1.5B writes them; kept outside the repository, in ``runs/texts/``, as they
quote the benchmark data), the first ``--limit`` of each
dataset, each pair once, with its question's passages.

Usage: PYTHONPATH=PATH/TO/VERSION python benchmarks/arbitration_cost.py [--limit 8]
       [--repeats 3] [--form extract] [--pairs one] [--texts FILE] [--items FILE]
       [--data-dir ../shared/data/raw]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import trustmargin_integrations
from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.evaluation.datasets import load_dataset

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "raw"

FRAMED = [
    (lambda a: f"Hello! {a}.", lambda a: f"Hello! {a}."),
    (lambda a: f"### Answer\n\n**{a}**", lambda a: f"### Answer\n\n**{a}**"),
    (lambda a: f"The answer is {a}. So, to sum up: {a}.",
     lambda a: f"The answer is {a}. So, to sum up: {a}."),
    (lambda a: f"I believe the answer is {a}, but I am not completely sure.",
     lambda a: f"According to the context, the answer is {a}."),
    (lambda a: f"From what I remember, it is {a}.",
     lambda a: f"Based on the provided passages, it is {a} [1]."),
    (lambda a: f"{a} is the answer to your question.",
     lambda a: f"The passages say that the answer is {a}."),
]


def main(argv: Sequence[str] | None = None) -> None:
    """Time the arbitration of the framed pairs and print one table row per repeat."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=8, help="questions per dataset")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pairs", choices=("all", "one"), default="all",
                        help="framings per disagreement: every one, or one in turn")
    parser.add_argument("--texts", type=Path, default=None,
                        help="time these saved long answers (benchmarks/longform.py "
                             "--save-texts) instead of framed short ones")
    parser.add_argument("--items", type=Path, default=None,
                        help="read the framed pairs from this JSON file, or write them there "
                             "when it does not exist yet, so that interleaved runs skip "
                             "generating the bare answers (they quote the benchmark data: "
                             "keep the file outside the repository); a file that exists is "
                             "timed as it is, whatever --limit, --pairs and --texts say")
    parser.add_argument("--form", default=None,
                        help="scoring form (default: the version's default)")
    args = parser.parse_args(argv)
    # A version without the option is timed at its default: only a named form is passed.
    config = {"config": TrustMarginConfig(scoring_form=args.form)} if args.form else {}
    tm = TrustMargin.from_pretrained(calibration=None, **config)
    if args.items is not None and args.items.exists():
        items = json.loads(args.items.read_text(encoding="utf-8"))
    else:
        items = (_saved(args.texts, args.data_dir, args.limit) if args.texts is not None
                 else _framed(tm, args.data_dir, args.limit, args.pairs))
        if args.items is not None:
            args.items.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    tm.arbitrate_batch(items[:8])  # warm-up
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tm.arbitrate_batch(items)
        seconds.append((time.perf_counter() - start) / len(items))
    where = Path(trustmargin_integrations.__file__).resolve().parents[1]
    form = args.form or "default"
    pairs = (f"{len(items)} saved long answers" if args.texts is not None
             else f"{len(items)} framed pairs ({args.pairs} per question)")
    print(f"| {where} | {form} | {pairs} | "
          + " | ".join(f"{s:.3f}" for s in seconds)
          + f" | median {statistics.median(seconds):.3f} s per question |")


def _framed(tm: TrustMargin, data_dir: Path, limit: int, pairs: str) -> list[dict[str, object]]:
    """The model's own strict disagreements on the first ``limit`` questions of each dev set,
    wrapped in the chat framings (every one, or one per question in turn)."""
    questions = [(e.question, [p.as_context() for p in e.passages or ()])
                 for name in ("cwq", "2wiki", "hotpotqa")
                 for e in load_dataset(name, data_dir)[:limit]]
    bare = tm.arbitrate_batch([{"question": q, "passages": p} for q, p in questions])
    disagreements = [(q, p, d) for (q, p), d in zip(questions, bare, strict=True)
                     if d.m is not None and d.source != "agree"]
    framings = ([[FRAMED[k % len(FRAMED)]] for k in range(len(disagreements))]
                if pairs == "one" else [FRAMED] * len(disagreements))
    return [{"question": q, "passages": p, "direct_answer": fd(d.direct_answer),
             "rag_answer": fr(d.rag_answer)}
            for (q, p, d), chosen in zip(disagreements, framings, strict=True)
            for fd, fr in chosen]


def _saved(path: Path, data_dir: Path, limit: int) -> list[dict[str, object]]:
    """The first ``limit`` saved generations of each dataset in ``path``, with their
    questions and passages from the data (read here, not with the package's loader, so that
    any version of the package times the same pairs)."""
    saved: dict[str, list[dict[str, str]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        saved.setdefault(record["dataset"], []).append(record)
    items: list[dict[str, object]] = []
    for name, records in saved.items():
        examples = {e.id: e for e in load_dataset(name, data_dir)}
        for record in records[:limit]:
            e = examples[record["id"]]
            items.append({"question": e.question,
                          "passages": [p.as_context() for p in e.passages or ()],
                          "direct_answer": record["direct_text"],
                          "rag_answer": record["rag_text"]})
    return items


if __name__ == "__main__":
    main()
