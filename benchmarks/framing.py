"""Framing invariance of chat-text arbitration, per framing and per scoring form: the share of
strict disagreements whose framed decision keeps the bare pair's side (away from near-ties,
|M - tau| >= 0.25) next to what a text-blind decision would reach at the same base rates, the
number of framed decisions that claim agreement (must be 0), and the F1 of the framed decisions
next to the bare decisions' F1 (each graded on the bare answer of the side it kept).

The disagreements are the model's own: each question is answered both ways under the paper's
prompts, and the pairs whose short answers differ are kept. Two suites: the same framing on
both sides (:data:`~trustmargin_integrations.evaluation.framing.FRAMINGS`) and a closed-book
style framing on Direct's side with a RAG style framing on RAG's
(:data:`~trustmargin_integrations.evaluation.framing.MIXED_FRAMINGS`). Also prints each form's
arbitration time per framed question at batch 8.

Usage: python benchmarks/framing.py [--limit 40] [--model smollm2-135m] [--dtype bfloat16]
       [--form differential --form extract] [--max-context-tokens 2048]
       [--data-dir ../shared/data/raw] [--out table.md]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.evaluation.datasets import load_dataset
from trustmargin_integrations.evaluation.framing import (
    FRAMINGS,
    MIXED_FRAMINGS,
    Framing,
    FramingPair,
    FramingRow,
    decision_scores,
    disagreements,
    invariance,
    invariance_table,
)
from trustmargin_integrations.evaluation.longform import FORMS
from trustmargin_integrations.evaluation.pipeline_runner import first_of_each_type

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "raw"


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, list[FramingRow]]]:
    """Measure and print the invariance table (one column pair per scoring form)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", action="append", default=None)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit", type=int, default=40, help="questions per dataset")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--form", action="append", default=None, choices=list(FORMS))
    parser.add_argument("--max-context-tokens", type=int, default=2048,
                        help="passage context budget (256 keeps a 2-core run short)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    # The paper's rule (calibration=None), not a shipped policy: this measures the rule.
    tm = TrustMargin.from_pretrained(
        args.model, dtype=args.dtype, calibration=None,
        config=TrustMarginConfig(max_context_tokens=args.max_context_tokens))
    questions = []
    for name in args.dataset or ["cwq", "2wiki", "hotpotqa"]:
        examples = first_of_each_type(load_dataset(name, args.data_dir), args.limit,
                                      lambda e: e.meta.get("type", ""))
        questions += [(e.question, [p.as_context() for p in e.passages or ()],
                       list(e.answers)) for e in examples]
    pairs = disagreements(tm, questions, progress=True)
    results: dict[str, dict[str, list[FramingRow]]] = {"same": {}, "mixed": {}}
    bare_scores: dict[str, list[float]] = {}
    seconds: dict[str, float] = {}
    framings: dict[str, Framing | FramingPair] = {**FRAMINGS, **MIXED_FRAMINGS}
    for form in args.form or FORMS:
        arbiter = TrustMargin(tm.backend, tm.config.model_copy(update={"scoring_form": form}))
        start = time.perf_counter()
        bare, rows = invariance(arbiter, pairs, framings, progress=True)
        seconds[form] = (time.perf_counter() - start) / (len(pairs) * (1 + len(rows)))
        bare_scores[form] = decision_scores(bare, pairs)
        results["same"][form] = rows[:len(FRAMINGS)]
        results["mixed"][form] = rows[len(FRAMINGS):]
    lines = [f"Framing invariance, {tm.backend.model_id}: {len(pairs)} strict disagreements "
             f"among {len(questions)} questions (PRAG BM25 top-3 passages, a "
             f"{args.max_context_tokens}-token context). Small samples: "
             "each rate's denominator is shown.", "",
             "Same framing on both sides:", "", *invariance_table(results["same"], bare_scores), "",
             "Closed-book framing on Direct, RAG framing on RAG:", "",
             *invariance_table(results["mixed"], bare_scores), "",
             "Arbitration time per framed question (batch 8, both texts given): "
             + ", ".join(f"{f} {s:.3f} s" for f, s in seconds.items()) + "."]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
