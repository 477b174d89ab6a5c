"""The ``trustmargin`` command."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError

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
EsUrlOpt = Annotated[str | None, typer.Option(
    "--elasticsearch", help="Elasticsearch URL (credentials: TRUSTMARGIN_ES_* variables).")]
EsIndexOpt = Annotated[str, typer.Option("--es-index", help="Elasticsearch index name.")]


def _load(model: str, device: str | None, dtype: str | None, *, remote_url: str | None = None,
          remote_model: str | None = None, concurrency: int = 8, **config: Any) -> Any:
    from trustmargin_integrations.arbiter import TrustMargin

    settings = TrustMarginConfig(**config)
    if remote_url:
        from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend

        backend = OpenAICompatBackend(remote_url, remote_model or model, tokenizer=model,
                                      max_concurrency=concurrency)
        return TrustMargin(backend, settings)
    with console.status(f"loading {model} ..."):
        return TrustMargin.from_pretrained(model, device=device, dtype=dtype, config=settings)


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
) -> None:
    """The main job, offline: index a small corpus, retrieve, answer both ways, arbitrate."""
    from trustmargin_integrations.demo import run_demo, summarize

    tm = _load(model, device, dtype, top_k=top_k)
    rows = run_demo(tm, limit=limit, top_k=top_k)
    table = Table(title=f"TrustMargin demo ({tm.backend.model_id}, top-{top_k} BM25)")
    for col in ("question", "Direct", "RAG", "chosen", "M_prior", "M_bind", "M", "gold", "ok"):
        table.add_column(col, overflow="fold")
    for r in rows:
        d = r.decision
        table.add_row(d.question, _short(d.direct_answer), _short(d.rag_answer), d.source,
                      _fmt(d.m_prior), _fmt(d.m_bind), _fmt(d.m), " | ".join(r.question.answers),
                      f"F1 {r.f1['trustmargin']:.2f}")
    console.print(table)
    summary = Table(title=f"Summary over {len(rows)} questions (x100)")
    for col in ("method", "EM", "F1"):
        summary.add_column(col)
    for method, scores in summarize(rows).items():
        summary.add_row(method, f"{scores['em']:.1f}", f"{scores['f1']:.1f}")
    console.print(summary)
    if output:
        _write_jsonl(output, [r.decision.model_dump(mode="json") for r in rows], append=False)
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
) -> None:
    """One question end to end: retrieve, both candidates, the margins, the decision."""
    retriever = _retriever(corpus, index, elasticsearch, es_index)
    passages = retriever.search(question, top_k)
    if not passages:
        raise InvalidInputError("question", "matched no passage in the corpus",
                                "rephrase it or index a corpus that covers it")
    tm = _load(model, device, dtype, remote_url=remote_url, remote_model=remote_model,
               concurrency=concurrency, top_k=top_k)
    d = tm.arbitrate(question, [p.as_context() for p in passages], direct_answer, rag_answer,
                     include_prompts=include_prompts)
    if as_json:
        print(d.model_dump_json(indent=2))
        return
    console.print(f"[bold]Question[/]  {d.question}")
    for i, p in enumerate(passages):
        score = "" if p.score is None else f", bm25 {p.score:.2f}"
        console.print(f"  passage {i} [dim]({p.title}{score})[/] {p.text[:110]}")
    console.print(f"[bold]Direct[/]    {d.direct_answer!r}")
    console.print(f"[bold]RAG[/]       {d.rag_answer!r}")
    console.print(f"M_prior {_fmt(d.m_prior)}  M_bind {_fmt(d.m_bind)}  M {_fmt(d.m)}  "
                  f"(tau {d.tau}, lambda {d.lambda_bind})")
    console.print(f"[bold green]Answer[/]    {d.answer!r}  [dim]source={d.source} "
                  f"reason={d.reason}[/]")
    if include_prompts and d.prompts:
        for view, text in d.prompts.model_dump().items():
            console.print(f"[dim]--- {view} ---[/]\n{text}")


def _read_candidates(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InvalidInputError("--input", f"{path} does not exist", "pass a JSONL file")
    records = []
    required = ("question", "passages", "direct_answer", "rag_answer")
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{path}:{n}", f"is not JSON ({exc.msg})",
                                    "write one JSON object per line") from exc
        if not isinstance(rec, dict):
            raise InvalidInputError(f"{path}:{n}", "is not a JSON object",
                                    "write one object per line")
        missing = [k for k in required if k not in rec]
        if missing:
            raise InvalidInputError(f"{path}:{n}.{missing[0]}", "is missing",
                                    f"every line needs {', '.join(required)}")
        rec.setdefault("id", str(n))
        records.append(rec)
    return records


def _write_jsonl(path: Path, records: list[dict[str, Any]], *, append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        fh.flush()


def _finished_ids(path: Path) -> set[str]:
    """Ids already written by an earlier (possibly interrupted) run; a torn last line is cut."""
    if not path.is_file():
        return set()
    done, good = set(), []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break
        done.add(str(rec.get("id")))
        good.append(line)
    path.write_text("".join(g + "\n" for g in good), encoding="utf-8")
    return done


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
) -> None:
    """Arbitrate given candidates (another system's outputs) without generating anything.

    Resumable: decisions already in OUTPUT (matched by id) are kept and not recomputed.
    """
    records = _read_candidates(input)
    for rec in records:
        for key in ("direct_answer", "rag_answer"):
            if not isinstance(rec[key], str):
                raise InvalidInputError(f"{input}:{rec['id']}.{key}", "must be a string",
                                        "give both candidates as text (score never generates)")
    done = _finished_ids(output)
    todo = [r for r in records if str(r["id"]) not in done]
    if done:
        console.print(f"resuming: {len(done)} decisions already in {output}, {len(todo)} to go")
    if not todo:
        return
    tm = _load(model, device, dtype, remote_url=remote_url, remote_model=remote_model,
               concurrency=concurrency, batch_size=batch_size)
    from tqdm.auto import tqdm

    with tqdm(total=len(todo), desc="scoring", unit="q") as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            decisions = tm.arbitrate_batch(chunk, include_prompts=include_prompts)
            _write_jsonl(output, [d.model_dump(mode="json") for d in decisions], append=True)
            bar.update(len(chunk))
    console.print(f"{len(records)} decisions in {output}")


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
        err_console.print(f"[red]error[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
