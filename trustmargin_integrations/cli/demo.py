"""``trustmargin demo``: the offline demo, with its summary and intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from trustmargin_integrations.cli.app import command, console
from trustmargin_integrations.cli.boundary import printable, shown_markup
from trustmargin_integrations.cli.common import (
    backend_choice,
    calibration_path,
    load_arbiter,
    shorten,
    signed,
    write_jsonl,
)
from trustmargin_integrations.cli.options import (
    BackendOpt,
    CalibrationOpt,
    ConcurrencyOpt,
    DeviceOpt,
    DtypeOpt,
    ModelOpt,
    TopKOpt,
)
from trustmargin_integrations.rule import Policy


@command()
def demo(
    backend: BackendOpt = None,
    model: ModelOpt = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N questions.")] = None,
    top_k: TopKOpt = 3,
    output: Annotated[Path | None, typer.Option(help="Also write the decisions (JSONL).")] = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    calibration: CalibrationOpt = None,
    concurrency: ConcurrencyOpt = None,
) -> None:
    """The main job, offline: index a small corpus, retrieve, answer both ways, arbitrate."""
    from trustmargin_integrations.demo import (
        CROSS_DOMAIN_WARNING,
        benchmark_evidence,
        run_demo,
        summarize,
    )
    from trustmargin_integrations.policy_file import AUTO, policy_file_for

    if output is not None:
        from trustmargin_integrations.output_guard import guard_output

        guard_output(output, "--output", inputs={"--calibration": calibration_path(calibration)})
    choice = backend_choice(backend, model, device=device, dtype=dtype,
                            concurrency=concurrency)
    # The same policy as Python's TrustMargin.from_pretrained(): the one shipped for a named
    # model (calibration "auto"), else the paper's rule; --calibration replaces it.
    if calibration is None:
        calibration = policy_file_for(AUTO, choice.model)
    tm = load_arbiter(choice, top_k=top_k, calibration=calibration)
    policy = tm.config.decision_policy.label
    rows = run_demo(tm, limit=limit, top_k=top_k)
    console.print(_decisions_table(rows, f"TrustMargin demo ({printable(tm.backend.model_id)}, "
                                         f"top-{top_k} BM25, policy: {policy})", policy))
    result = summarize(rows)
    console.print(_summary_table(result, len(rows), policy))
    console.print(printable(result.note()))
    evidence = benchmark_evidence()
    if evidence:
        console.print("[bold]Measured on real benchmarks[/] (docs/results; 95% paired "
                      "bootstrap intervals, questions outside each calibration's fit):")
        for line in evidence:
            console.print("  " + printable(line))
        console.print(f"[yellow]{CROSS_DOMAIN_WARNING}[/]")
    if output:
        write_jsonl(output, [r.decision.model_dump(mode="json") for r in rows])
        console.print(f"decisions written to {shown_markup(str(output))}")
    console.print(printable(result.meaning(policy)))


def _decisions_table(rows: list[Any], title: str, policy: str) -> Table:
    table = Table(title=title)
    for col in ("question", "Direct", "RAG", f"kept ({policy})", "paper's rule", "M_prior",
                "M_bind", "M", "gold", "ok"):
        table.add_column(col, overflow="fold")
    for r in rows:
        d = r.decision
        table.add_row(printable(d.question), printable(shorten(d.direct_answer)),
                      printable(shorten(d.rag_answer)), d.source, d.paper_choice or d.source,
                      signed(d.m_prior), signed(d.m_bind), signed(d.m),
                      printable(" | ".join(r.question.answers)),
                      f"F1 {r.f1['trustmargin']:.2f}")
    return table


def _summary_table(result: Any, n: int, policy: str) -> Table:
    summary = Table(title=f"Summary over {n} questions (x100); trustmargin = policy {policy}")
    for col in ("method", "EM", "EM 95% CI", "F1", "F1 95% CI"):
        summary.add_column(col)
    names = {"trustmargin": f"trustmargin ({policy})",
             "paper_rule": Policy.paper().label}
    for method, scores in result.scores.items():
        summary.add_row(names.get(method, method), f"{scores['em']:.1f}",
                        result.em.methods[method].ci(1),
                        f"{scores['f1']:.1f}", result.f1.methods[method].ci(1))
    for key, f1d in result.f1.differences.items():
        emd = result.em.differences[key]
        which = f1d.b if f1d.b == emd.b else f"EM: {emd.b}, F1: {f1d.b}"
        label = key.replace("best_single", f"best single ({which})")
        summary.add_row(label, f"{emd.mean:+.1f}", f"{emd.ci(1)} P>0 {emd.p_positive:.2f}",
                        f"{f1d.mean:+.1f}", f"{f1d.ci(1)} P>0 {f1d.p_positive:.2f}")
    return summary
