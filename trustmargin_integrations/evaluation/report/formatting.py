"""What every report section shares: Markdown tables, numbers, dataset labels, safe file
names, and the F1 / EM bootstrap cells of the smaller tables."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    Bootstrap,
    grouped_bootstrap,
    paired_bootstrap,
)
from trustmargin_integrations.evaluation.diagnostics import METHOD_LABELS

DATASET_LABELS = {"cwq": "CWQ", "2wiki": "2Wiki", "hotpotqa": "HotpotQA"}

# Per-question (F1 list, EM list) of each method, for one group of questions.
MethodScores = Mapping[str, tuple[list[float], list[float]]]


def dataset_label(name: str) -> str:
    """The paper's spelling of a dataset name (the name itself for other datasets)."""
    return DATASET_LABELS.get(name, name)


def number(value: float | None, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals, or ``n/a`` when it is undefined."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def inside(folder: Path, name: str) -> Path:
    """``folder / name`` with ``name`` reduced to a plain file name.

    Dataset names come from the run's ``manifest.json``; a crafted one ("../../x") must not
    write outside the run directory.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "unnamed"
    if safe != name:
        # Two names that clean to the same text ("a/b", "a_b") keep separate files.
        stem, dot, ext = safe.rpartition(".")
        tag = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{stem}-{tag}.{ext}" if dot else f"{safe}-{tag}"
    return folder / safe


def metric_boots(groups: Mapping[str, MethodScores],
                 comparisons: Sequence[tuple[str, str]]) -> dict[str, Bootstrap]:
    """F1 and EM bootstraps: one group -> paired, several -> grouped (mean of means)."""
    out = {}
    for col, metric in enumerate(("f1", "em")):
        data = {g: {m: v[col] for m, v in methods.items()} for g, methods in groups.items()}
        out[metric] = (paired_bootstrap(next(iter(data.values())), comparisons)
                       if len(data) == 1 else grouped_bootstrap(data, comparisons))
    return out


def f1_cells(boots: Mapping[str, Bootstrap], methods: Sequence[str]) -> list[str]:
    """One "mean [low, high]" F1 cell per method."""
    return [f"{boots['f1'].methods[m].mean:.2f} {boots['f1'].methods[m].ci()}"
            for m in methods]


def f1_difference(boots: Mapping[str, Bootstrap], key: str) -> str:
    """The F1 difference ``key`` with its interval (and, against the best single source,
    which source that was)."""
    d = boots["f1"].differences[key]
    versus = "" if key.split(" - ")[1] != BEST_SINGLE else f" vs {METHOD_LABELS[d.b]}"
    return f"{d.mean:+.2f} {d.ci()}{versus}"
