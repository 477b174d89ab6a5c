"""How many labeled questions the domain check needs, and whether unlabeled statistics could
replace them: learning curves, half/half checks and label-free signals of eval runs.

    PYTHONPATH=$PWD python benchmarks/policy_curves.py /work/runs/smollm2 [RUN_DIR ...]
        [--seeds 200] [--sizes 25 50 100 200] [--json OUT.json] [--data-dir RAW]

A run still in progress has no manifest yet: with ``--data-dir`` (the folder of the named
datasets) its cached decisions are read straight from ``cache.jsonl`` (read only) and scored
against the datasets' gold answers, so partial runs can be measured too.

Per run directory (``trustmargin eval --run-dir``; read only) and dataset it prints:

1. Direct, RAG and the paper's rule (F1 x100, 95% paired bootstrap intervals);
2. the check on a labeled half (seeded, as ``calibrate --holdout 0.5`` splits) and its choice
   scored on the other half against the better single source there (paired interval);
3. the learning curves of :mod:`trustmargin_integrations.evaluation.learning_curve`;
4. label-free statistics (no gold needed) next to the paper rule's loss to RAG, to see
   whether any of them announces that loss.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from trustmargin_integrations.evaluation.bootstrap import grouped_bootstrap
from trustmargin_integrations.evaluation.datasets import load_named
from trustmargin_integrations.evaluation.diagnostics import (
    GradedDecision,
    score_decision,
    score_records,
)
from trustmargin_integrations.evaluation.domain_check import check_policy
from trustmargin_integrations.evaluation.learning_curve import (
    DEFAULT_SEEDS,
    SIZES,
    curve_rows,
    curve_samples,
    format_rows,
)
from trustmargin_integrations.evaluation.policy_selection import PolicyTable
from trustmargin_integrations.evaluation.rule_fit import split_holdout
from trustmargin_integrations.evaluation.rundir import load_run
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision

MIN_QUESTIONS = 50
"""Datasets with fewer questions (a run in progress) are skipped: half of them is too few."""


def read_run(run_dir: Path, data_dir: Path | None) -> dict[str, list[GradedDecision]]:
    """Scored questions per dataset: from the manifest, or (a run in progress, ``data_dir``
    given) from the cache's decisions, whose ids are ``dataset:test_id``."""
    if (run_dir / "manifest.json").is_file() or data_dir is None:
        return {r.name: score_records(r.records) for r in load_run(run_dir)}
    decisions: dict[str, Decision] = {}
    with (run_dir / "cache.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            value = json.loads(line).get("value") or {}
            if "decision" in value:
                decision = Decision.model_validate(value["decision"])
                decisions[str(decision.id)] = decision
    out: dict[str, list[GradedDecision]] = {}
    for name in dict.fromkeys(ident.split(":", 1)[0] for ident in decisions):
        gold = {e.id: e.answers for e in load_named(name, data_dir)}
        out[name] = [score_decision(d, gold[ident.split(":", 1)[1]])
                     for ident, d in decisions.items() if ident.startswith(name + ":")]
    return out


def sources(table: PolicyTable, members: list[int]) -> dict[str, str]:
    """Direct, RAG, paper rule and paper - RAG on ``members`` (x100, intervals)."""
    scores = {name: table.values(table.chooses_rag(p, members), members).tolist()
              for name, p in (("direct", Policy.always_direct()), ("rag", Policy.always_rag()),
                              ("paper", Policy.paper()))}
    b = grouped_bootstrap({"d": scores}, [("paper", "rag")], seed=0)
    out = {m: f"{v.mean:.2f} {v.ci()}" for m, v in b.methods.items()}
    d = b.differences["paper - rag"]
    out["paper - rag"] = f"{d.mean:+.2f} {d.ci()}"
    return out


def half_check(table: PolicyTable, members: list[int], seed: int) -> dict[str, object]:
    """Select on a labeled half, score the choice on the other half against the better
    single source there (paired interval)."""
    names = [table.dataset_names[q] for q in members]
    keep = split_holdout(names, 0.5, seed)
    labeled = [q for q, k in zip(members, keep, strict=True) if k]
    other = [q for q, k in zip(members, keep, strict=True) if not k]
    result = check_policy(table, labeled, seed=seed)
    single = max((Policy.always_rag(), Policy.always_direct()),
                 key=lambda p: table.score(p, other))
    scores = {"chosen": table.values(table.chooses_rag(result.chosen, other), other).tolist(),
              "single": table.values(table.chooses_rag(single, other), other).tolist()}
    d = grouped_bootstrap({"d": scores}, [("chosen", "single")], seed=seed
                          ).differences["chosen - single"]
    return {"labeled": len(labeled), "other": len(other), "verdict": result.verdict,
            "chosen": result.chosen.label,
            "other_half": f"{d.mean:+.2f} {d.ci()} vs {single.label}"}


def label_free(table: PolicyTable, members: list[int]) -> dict[str, float]:
    """Statistics a user could compute without gold answers."""
    decisions = [table.problem.scored[q].decision for q in members]
    scored = [q for q in members if not table.settled[q]]
    prior, bind = table.m_prior[scored], table.m_bind[scored]
    return {
        "paper_rag_rate": 100 * float(table.chooses_rag(Policy.paper(), members).mean()),
        "agree_rate": 100 * float(np.mean([d.reason == "answers_agree" for d in decisions])),
        "mean_m_prior": float(prior.mean()), "median_m_prior": float(np.median(prior)),
        "mean_m_bind": float(bind.mean()), "mean_m": float((prior + 0.5 * bind).mean()),
        "share_m_prior_below_-2": 100 * float(np.mean(prior < -2)),
    }


def dataset_lines(datasets: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown tables: sources and the half/half check; label-free statistics."""
    lines = ["| dataset | n | Direct F1 | RAG F1 | paper F1 | paper - RAG | chosen on a half "
             "| chosen - best single, other half |", "|" + "---|" * 8]
    for name, d in datasets.items():
        src, half = d["sources"], d["half"]
        lines.append(f"| {name} | {d['n']} | {src['direct']} | {src['rag']} | {src['paper']} "
                     f"| {src['paper - rag']} | {half['chosen']} | {half['other_half']} |")
    lines += ["", "verdicts on the labeled halves:"]
    lines += [f"- {name}: {d['half']['verdict']}" for name, d in datasets.items()]
    keys = list(next(iter(datasets.values()))["label_free"])
    lines += ["", "| dataset | paper - RAG | " + " | ".join(keys) + " |",
              "|" + "---|" * (len(keys) + 2)]
    for name, d in datasets.items():
        stats = " | ".join(f"{d['label_free'][k]:.2f}" for k in keys)
        lines.append(f"| {name} | {d['sources']['paper - rag']} | {stats} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    """Print the tables (and write them as JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    report: dict[str, object] = {}
    for run_dir in args.run_dirs:
        by_dataset = read_run(run_dir, args.data_dir)
        table = PolicyTable(by_dataset)
        model = table.problem.scored[0].decision.model_id
        print(f"\n## {run_dir} (model {model})\n")
        entry: dict[str, object] = {"model": model, "datasets": {}}
        started = time.perf_counter()
        samples = []
        for name in by_dataset:
            members = [q for q, n in enumerate(table.dataset_names) if n == name]
            if len(members) < MIN_QUESTIONS:
                print(f"{name}: {len(members)} questions so far, too few to measure (skipped)")
                continue
            stats = {"n": len(members), "sources": sources(table, members),
                     "half": half_check(table, members, seed=0),
                     "label_free": label_free(table, members)}
            entry["datasets"][name] = stats  # type: ignore[index]
            samples += curve_samples(table, name, args.sizes, args.seeds)
        if not entry["datasets"]:
            continue
        print("\n".join(dataset_lines(entry["datasets"])))  # type: ignore[arg-type]
        rows = curve_rows(samples)
        elapsed = time.perf_counter() - started
        print(f"\nlearning curves ({args.seeds} seeds, {elapsed:.0f} s):\n")
        print("\n".join(format_rows(rows)))
        entry["curves"] = [asdict(row) for row in rows]
        entry["seconds"] = elapsed
        report[str(run_dir)] = entry
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()

