"""The ``trustmargin`` command."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError
from trustmargin_integrations.urls import redact_url

app = typer.Typer(
    name="trustmargin",
    help="TrustMargin: decide per question whether to trust the closed-book (Direct) answer "
         "or the retrieval-augmented (RAG) answer, from the frozen model's own likelihoods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets a wide console so the decision tables stay readable.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

ModelOpt = Annotated[str, typer.Option(
    "--model", "-m",
    help="Named model (smollm2-135m, qwen2.5-1.5b), a local directory, a .gguf file or a "
         "Hugging Face id.")]
DeviceOpt = Annotated[str | None, typer.Option(help="cpu, cuda, cuda:1 ... (default: auto).")]
DtypeOpt = Annotated[str | None, typer.Option(
    help="float32, bfloat16 or float16 (default: fp32 on CPU, bf16/fp16 on GPU).")]
TopKOpt = Annotated[int, typer.Option("--top-k", "-k", min=1, help="Passages to retrieve.")]
PromptsOpt = Annotated[bool, typer.Option(
    "--include-prompts/--no-include-prompts",
    help="Attach the exact rendered prompt of each view to every decision.")]


RemoteUrlOpt = Annotated[str | None, typer.Option(
    "--remote-url",
    help="Score and generate on an OpenAI-compatible server (vLLM, llama.cpp) instead of "
         "loading the model here; --model then names its tokenizer (HF id or directory).")]
RemoteModelOpt = Annotated[str | None, typer.Option(
    "--remote-model", help="The model name the server serves (default: --model).")]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, help="Requests in flight to the server.")]
TauOpt = Annotated[float | None, typer.Option(
    "--tau", help="Decision threshold: RAG iff M > tau (default: the paper's -1.5).")]
LambdaOpt = Annotated[float | None, typer.Option(
    "--lambda-bind", help="Weight of the binding margin (default: the paper's 0.5).")]
CalibrationOpt = Annotated[str | None, typer.Option(
    "--calibration", help="A file from `trustmargin calibrate`, or 'shipped' for the one "
    "shipped with a named model: its lambda-bind and tau replace the paper's.")]
EsUrlOpt = Annotated[str | None, typer.Option(
    "--elasticsearch", help="Elasticsearch URL (credentials: TRUSTMARGIN_ES_* variables).")]
EsIndexOpt = Annotated[str, typer.Option("--es-index", help="Elasticsearch index name.")]


def _load(model: str, device: str | None, dtype: str | None, *, remote_url: str | None = None,
          remote_model: str | None = None, concurrency: int = 8,
          calibration: Any = None, **config: Any) -> Any:
    from trustmargin_integrations.arbiter import TrustMargin

    settings = _config(**config)
    fitted = _calibration(calibration, model, config)
    if remote_url:
        from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend

        backend = OpenAICompatBackend(remote_url, remote_model or model, tokenizer=model,
                                      max_concurrency=concurrency)
        if fitted is not None:
            return TrustMargin.calibrated(backend, fitted, settings)
        return TrustMargin(backend, settings)
    with console.status(f"loading {model} ..."):
        return TrustMargin.from_pretrained(model, device=device, dtype=dtype, config=settings,
                                           calibration=fitted)


def _calibration(value: Any, model: str, config: dict[str, Any]) -> Any:
    """The calibration a --calibration option names (None without one; a loaded one as it
    is), before any model loads; giving --tau or --lambda-bind as well is ambiguous, so it
    is an error."""
    if value is None:
        return None
    from trustmargin_integrations.evaluation.calibration import Calibration

    for key in ("tau", "lambda_bind"):
        if key in config:
            option = "--" + key.replace("_", "-")
            raise InvalidInputError(option, "cannot be combined with --calibration (the "
                                    "calibration sets it)", f"drop {option} or --calibration")
    return Calibration.coerce(value, model=model)


def _config(**values: Any) -> TrustMarginConfig:
    """The config, with a bad option reported as the option the user typed."""
    try:
        return TrustMarginConfig(**values)
    except InvalidInputError as exc:
        option = "--" + exc.field.replace("_", "-")
        raise InvalidInputError(option, exc.problem, exc.fix) from None


def _rule(tau: float | None, lambda_bind: float | None) -> dict[str, float]:
    """The decision rule's settings the user gave (the config's defaults otherwise)."""
    given = {"tau": tau, "lambda_bind": lambda_bind}
    return {k: v for k, v in given.items() if v is not None}


def _short(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


@app.command()
def demo(
    model: ModelOpt = "smollm2-135m",
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N questions.")] = None,
    top_k: TopKOpt = 3,
    output: Annotated[Path | None, typer.Option(help="Also write the decisions (JSONL).")] = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    calibration: CalibrationOpt = None,
) -> None:
    """The main job, offline: index a small corpus, retrieve, answer both ways, arbitrate."""
    from trustmargin_integrations.demo import benchmark_evidence, run_demo, summarize

    tm = _load(model, device, dtype, top_k=top_k, calibration=calibration)
    rows = run_demo(tm, limit=limit, top_k=top_k)
    table = Table(title=f"TrustMargin demo ({tm.backend.model_id}, top-{top_k} BM25)")
    for col in ("question", "Direct", "RAG", "chosen", "M_prior", "M_bind", "M", "gold", "ok"):
        table.add_column(col, overflow="fold")
    for r in rows:
        d = r.decision
        table.add_row(escape(d.question), escape(_short(d.direct_answer)),
                      escape(_short(d.rag_answer)), d.source,
                      _fmt(d.m_prior), _fmt(d.m_bind), _fmt(d.m),
                      escape(" | ".join(r.question.answers)),
                      f"F1 {r.f1['trustmargin']:.2f}")
    console.print(table)
    result = summarize(rows)
    summary = Table(title=f"Summary over {len(rows)} questions (x100)")
    for col in ("method", "EM", "EM 95% CI", "F1", "F1 95% CI"):
        summary.add_column(col)
    for method, scores in result.scores.items():
        summary.add_row(method, f"{scores['em']:.1f}", result.em.methods[method].ci(1),
                        f"{scores['f1']:.1f}", result.f1.methods[method].ci(1))
    for key, f1d in result.f1.differences.items():
        emd = result.em.differences[key]
        which = f1d.b if f1d.b == emd.b else f"EM: {emd.b}, F1: {f1d.b}"
        label = key.replace("best_single", f"best single ({which})")
        summary.add_row(label, f"{emd.mean:+.1f}", f"{emd.ci(1)} P>0 {emd.p_positive:.2f}",
                        f"{f1d.mean:+.1f}", f"{f1d.ci(1)} P>0 {f1d.p_positive:.2f}")
    console.print(summary)
    console.print(escape(result.note()))
    evidence = benchmark_evidence()
    if evidence:
        console.print("[bold]Measured on real benchmarks[/] (docs/results; 95% paired "
                      "bootstrap intervals, questions outside each calibration's fit):")
        for line in evidence:
            console.print("  " + escape(line))
    if output:
        _write_jsonl(output, [r.decision.model_dump(mode="json") for r in rows])
        console.print(f"decisions written to {output}")


def _retriever(corpus: Path | None, index: Path | None, elasticsearch: str | None = None,
               es_index: str = "trustmargin") -> Any:
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    if [corpus, index, elasticsearch].count(None) != 2:
        raise InvalidInputError("--corpus/--index/--elasticsearch", "exactly one must be given",
                                "pass --corpus FILE (indexed on the fly), --index DIR or "
                                "--elasticsearch URL")
    if elasticsearch:
        from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchRetriever

        return ElasticsearchRetriever.connect(elasticsearch, index=es_index)
    return BM25Index.from_corpus(corpus) if corpus else BM25Index.load(index)  # type: ignore[arg-type]


@app.command()
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
    model: ModelOpt = "smollm2-135m",
    include_prompts: PromptsOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Decision as JSON.")] = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = 8,
    tau: TauOpt = None,
    lambda_bind: LambdaOpt = None,
    calibration: CalibrationOpt = None,
) -> None:
    """One question end to end: retrieve, both candidates, the margins, the decision."""
    retriever = _retriever(corpus, index, elasticsearch, es_index)
    tm = _load(model, device, dtype, remote_url=remote_url, remote_model=remote_model,
               concurrency=concurrency, top_k=top_k, calibration=calibration,
               **_rule(tau, lambda_bind))
    d = tm.answer(question, retriever, top_k, direct_answer=direct_answer, rag_answer=rag_answer,
                  include_prompts=include_prompts)
    if as_json:
        print(d.model_dump_json(indent=2))
        return
    # User, corpus and model text is printed escaped: a "[/]" in it is not rich markup.
    console.print(f"[bold]Question[/]  {escape(d.question)}")
    if not d.passages:
        console.print("  [dim](no passage matched: answered closed-book)[/]")
    for p in d.passages:
        score = "" if p.score is None else f", score {p.score:.2f}"
        label = escape(f"{p.title}{score}, id {p.id}")
        console.print(f"  passage {p.rank} [dim]({label})[/]")
    console.print(f"[bold]Direct[/]    {escape(repr(d.direct_answer))}")
    console.print(f"[bold]RAG[/]       {escape(repr(d.rag_answer))}")
    console.print(f"M_prior {_fmt(d.m_prior)}  M_bind {_fmt(d.m_bind)}  M {_fmt(d.m)}  "
                  f"(tau {d.tau}, lambda {d.lambda_bind})")
    console.print(f"[bold green]Answer[/]    {escape(repr(d.answer))}  [dim]source={d.source} "
                  f"reason={d.reason}[/]")
    for warning in d.warnings:
        console.print(f"[yellow]warning[/]   {escape(warning)}")
    if include_prompts and d.prompts:
        for view, text in d.prompts.model_dump().items():
            console.print(f"[dim]--- {view} ---[/]\n{escape(text)}")


def _write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


@app.command()
def score(
    input: Annotated[Path, typer.Option("--input", "-i", help=(
        "JSONL of candidates: question, passages (list of str), direct_answer, rag_answer, "
        "and optionally id (default: line number)."))],
    output: Annotated[Path, typer.Option("--output", "-o", help="Decisions (JSONL).")],
    model: ModelOpt = "smollm2-135m",
    batch_size: Annotated[int, typer.Option(min=1, help="Questions per model call.")] = 8,
    include_prompts: PromptsOpt = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = 8,
    tau: TauOpt = None,
    lambda_bind: LambdaOpt = None,
    calibration: CalibrationOpt = None,
) -> None:
    """Arbitrate given candidates (another system's outputs) without generating anything.

    The whole file is validated before the model loads. Resumable: finished decisions are
    kept in OUTPUT.cache (keyed by the record, model and settings) and OUTPUT is written
    complete, in input order, at the end. Keys other than the candidate fields are carried
    to each decision's metadata.
    """
    from trustmargin_integrations.score_file import key_settings, run_score

    rule = _rule(tau, lambda_bind)
    settings = _config(batch_size=batch_size, include_prompts=include_prompts, **rule)
    fitted = _calibration(calibration, model, rule)
    if fitted is not None:
        # The cache key holds the rule in force, so a calibrated run never reuses another's.
        settings = fitted.apply(settings)
    keyed = key_settings(remote_model or model if remote_url else model, settings,
                         dtype=dtype, device=device,
                         remote=redact_url(remote_url) if remote_url else None)

    def told(reused: int, todo: int) -> None:
        if reused:
            console.print(f"resuming: {reused} decisions reused from {output}.cache, "
                          f"{todo} to compute")

    report = run_score(
        input, output, keyed,
        lambda: _load(model, device, dtype, remote_url=remote_url, remote_model=remote_model,
                      concurrency=concurrency, batch_size=batch_size,
                      include_prompts=include_prompts, calibration=fitted, **rule),
        batch_size=batch_size, on_reuse=told,
    )
    console.print(f"{report.records} decisions in {escape(str(report.output))} "
                  f"({report.computed} computed, {report.reused} reused)")


@app.command(name="index")
def index_cmd(
    corpus: Annotated[Path, typer.Option(
        help="JSON/JSONL corpus of {title, text} (or DPR psgs_w100.tsv with --elasticsearch).")],
    out: Annotated[Path | None, typer.Option(help="Directory to write the BM25 index to.")
                   ] = None,
    elasticsearch: EsUrlOpt = None,
    es_index: EsIndexOpt = "trustmargin",
    recreate: Annotated[bool, typer.Option(help="Drop and recreate the ES index first.")
                        ] = False,
) -> None:
    """Build the embedded BM25 index (--out DIR) or index into Elasticsearch (--elasticsearch)."""
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    if (out is None) == (elasticsearch is None):
        raise InvalidInputError("--out/--elasticsearch", "exactly one must be given",
                                "pass --out DIR for the embedded index or --elasticsearch URL")
    if elasticsearch:
        from trustmargin_integrations.retrieval.elasticsearch import index_command

        report = index_command(corpus, elasticsearch, index=es_index, recreate=recreate)
        console.print(f"indexed {report.indexed} passages into {report.index} "
                      f"({report.failed} failed) in {report.seconds:.1f} s")
        return
    assert out is not None

    built = BM25Index.from_corpus(corpus, show_progress=True)
    built.save(out)
    console.print(f"indexed {len(built)} passages into {out}")


@app.command()
def models() -> None:
    """List the named models this package can load offline."""
    from trustmargin_integrations.models import REGISTRY

    for spec in REGISTRY.values():
        console.print(f"[bold]{spec.name}[/]  {spec.description}\n    install: {spec.install_hint}")


# Commands contributed by optional sub-packages; each exposes ``register(app)``.
_PLUGINS = ("trustmargin_integrations.evaluation.cli",)
for _name in _PLUGINS:
    importlib.import_module(_name).register(app)


def main() -> None:
    """Entry point that turns our typed errors into one clear line and exit code 2."""
    try:
        app()
    except TrustMarginError as exc:
        # The message quotes user text: escape it, and never wrap a path or a fix mid-word.
        err_console.print(f"[red]error[/] {escape(str(exc))}", soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
