"""The report's frame: its heading, the run's setup, and the latency on this machine."""

from __future__ import annotations

from dataclasses import asdict

from trustmargin_integrations.evaluation.diagnostics import DEFAULT_LAMBDA, DEFAULT_TAU, latency
from trustmargin_integrations.evaluation.report.formatting import (
    dataset_label,
    markdown_table,
    number,
)
from trustmargin_integrations.evaluation.report.view import RunView, Section


def heading(view: RunView, title: str | None) -> Section:
    """The title and the rule and metrics every table uses."""
    return Section([
        f"# {title or 'TrustMargin evaluation report'}", "",
        f"Model: **{', '.join(view.models)}**. Decision rule: lambda_bind = {DEFAULT_LAMBDA}, "
        f"tau = {DEFAULT_TAU} (the paper's defaults). F1 and EM are x100, max over gold "
        "aliases; Average is the arithmetic mean over datasets.", ""])


def setup(view: RunView) -> Section:
    """One row per dataset (size, retrieval, top-k, dtype, ids) and the commands run."""
    rows = []
    for run in view.runs:
        info = run.info
        rows.append([dataset_label(run.name), str(len(run.records)),
                     str(info.get("retrieval", "?")), str(info.get("top_k", "?")),
                     str(info.get("dtype", "?")),
                     str(info.get("first_id", "?")) + "-" + str(info.get("last_id", "?"))])
    lines = ["## Setup", "",
             *markdown_table(["dataset", "questions", "retrieval", "top-k", "dtype", "ids"],
                             rows)]
    commands = [run.info["command"] for run in view.runs if run.info.get("command")]
    if commands:
        lines += ["", "Commands:", "", "```", *sorted(set(commands)), "```"]
    return Section(lines)


def latency_section(view: RunView) -> Section:
    """Seconds per question of each method, and TrustMargin's cost relative to both."""
    rows, per_dataset = [], {}
    for run in view.runs:
        lat = latency(run.records)
        rows.append([dataset_label(run.name), number(lat.direct_s, 3), number(lat.rag_s, 3),
                     number(lat.trustmargin_s, 3), number(lat.scoring_s, 3),
                     number(lat.relative_to_direct_plus_rag, 2)])
        per_dataset[run.name] = {"latency": {
            **asdict(lat), "relative_to_direct_plus_rag": lat.relative_to_direct_plus_rag}}
    hosts = sorted({str(r.info.get("host", "")) for r in view.runs if r.info.get("host")})
    lines = ["", "## Latency on this machine", "",
             *markdown_table(["dataset", "Direct s/q", "BM25-RAG s/q", "TrustMargin s/q",
                              "of which scoring s/q", "TM / (Direct + RAG)"], rows),
             "", "Seconds per question are each question's share of its batch's wall time "
             f"(batch size {view.runs[0].info.get('batch_size', '?')}), CPU only"
             + (f" ({'; '.join(hosts)})" if hosts else "")
             + ". TrustMargin includes both generations and the scoring. Other processes "
             "shared the CPU, so absolute numbers are pessimistic; the ratio is the useful "
             "part."]
    return Section(lines, per_dataset=per_dataset)
