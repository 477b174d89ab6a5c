"""``trustmargin ask``: one question end to end, printed or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from trustmargin_integrations.cli.app import command, console
from trustmargin_integrations.cli.boundary import printable
from trustmargin_integrations.cli.common import (
    backend_choice,
    load_arbiter,
    open_retriever,
    rule_options,
    signed,
)
from trustmargin_integrations.cli.options import (
    BackendOpt,
    CalibrationOpt,
    ConcurrencyOpt,
    DeviceOpt,
    DtypeOpt,
    EsIndexOpt,
    EsUrlOpt,
    LambdaOpt,
    ModelOpt,
    PromptsOpt,
    RemoteModelOpt,
    RemoteUrlOpt,
    TauOpt,
    TopKOpt,
)


@command()
def ask(
    question: Annotated[str, typer.Argument(help="The question to answer.")],
    corpus: Annotated[Path | None, typer.Option(help="JSON/JSONL corpus of {title, text}.")
                      ] = None,
    index: Annotated[Path | None, typer.Option(help="A directory from `trustmargin index`.")
                     ] = None,
    elasticsearch: EsUrlOpt = None,
    es_index: EsIndexOpt = "trustmargin",
    top_k: TopKOpt = 3,
    direct_answer: Annotated[str | None, typer.Option(help="Use this Direct answer.")] = None,
    rag_answer: Annotated[str | None, typer.Option(help="Use this RAG answer.")] = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    include_prompts: PromptsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Decision as JSON.")] = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = None,
    tau: TauOpt = None,
    lambda_bind: LambdaOpt = None,
    calibration: CalibrationOpt = None,
) -> None:
    """One question end to end: retrieve, both candidates, the margins, the decision."""
    choice = backend_choice(backend, model, remote_url, remote_model, device=device,
                            dtype=dtype, concurrency=concurrency)
    retriever = open_retriever(corpus, index, elasticsearch, es_index)
    tm = load_arbiter(choice, top_k=top_k, calibration=calibration,
                      **rule_options(tau, lambda_bind))
    d = tm.answer(question, retriever, top_k, direct_answer=direct_answer, rag_answer=rag_answer,
                  include_prompts=include_prompts)
    if as_json:
        # JSON escapes every control character itself.
        print(d.model_dump_json(indent=2))
        return
    _print_decision(d, include_prompts)


def _print_decision(d: Any, include_prompts: bool) -> None:
    # User, corpus and model text goes through printable(): a "[/]" in it is not rich
    # markup, and an escape sequence in it does not reach the terminal.
    console.print(f"[bold]Question[/]  {printable(d.question)}")
    if not d.passages:
        console.print("  [dim](no passage matched: answered closed-book)[/]")
    for p in d.passages:
        score = "" if p.score is None else f", score {p.score:.2f}"
        label = printable(f"{p.title}{score}, id {p.id}")
        console.print(f"  passage {p.rank} [dim]({label})[/]")
    # Each side's text as given (or generated); what was compared, when only part of it was.
    for label, text, part in (("Direct", d.direct_raw or d.direct_answer, d.direct_answer),
                              ("RAG", d.rag_raw or d.rag_answer, d.rag_answer)):
        compared = f"  (compared: {printable(repr(part))})" if part != text else ""
        console.print(f"[bold]{label:<9}[/] {printable(repr(text))}{compared}")
    console.print(f"M_prior {signed(d.m_prior)}  M_bind {signed(d.m_bind)}  M {signed(d.m)}  "
                  f"(tau {d.tau}, lambda {d.lambda_bind})")
    console.print(f"[bold green]Answer[/]    {printable(repr(d.answer))}  [dim]source="
                  f"{d.source} reason={d.reason}[/]")
    for warning in d.warnings:
        console.print(f"[yellow]warning[/]   {printable(warning)}")
    if include_prompts and d.prompts:
        for view, text in d.prompts.model_dump().items():
            console.print(f"[dim]--- {view} ---[/]\n{printable(text)}")
