"""``trustmargin eval``: run Direct, BM25-RAG, TrustMargin (and optionally other pipelines and
the retrieval-noise experiment) over datasets into a resumable run directory."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import shown
from trustmargin_integrations.cli.common import BackendChoice, backend_choice, import_spec
from trustmargin_integrations.cli.options import (
    BackendOpt,
    ConcurrencyOpt,
    ModelOpt,
    RemoteModelOpt,
    RemoteUrlOpt,
)
from trustmargin_integrations.config import DEFAULT_SCORING_FORM
from trustmargin_integrations.environment import variables_named
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import (
    NAMED_DATASETS,
    EvalExample,
    corpus_path,
    load_dataset,
    passage_pool,
)
from trustmargin_integrations.evaluation.runner import (
    EvalRecord,
    PassageSource,
    PrecomputedPassages,
    RetrieverPassages,
    model_dtype,
    passages_shown,
    run_eval,
    run_noise,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.config import ScoringForm
    from trustmargin_integrations.evaluation.pipeline_runner import PipelineRecord
    from trustmargin_integrations.store import ResultStore

    BeforeRun = Callable[[TrustMargin, list[EvalExample], ResultStore, PassageSource], int]

DATA_ENV = "TRUSTMARGIN_DATA"


@dataclass(frozen=True)
class _Settings:
    """The options of one ``eval`` run, checked."""

    backend: BackendChoice
    top_k: int
    batch_size: int
    run_dir: Path
    noise_limit: int
    noise_levels: list[int]
    noise_seed: int
    noise_corpus: Path | None
    pipelines: list[str]
    pipeline_limit: int | None
    pipeline_corpus: Path | None
    scoring_form: ScoringForm = DEFAULT_SCORING_FORM  # how records' own chain answers are compared


# Long only by its 25 option declarations (typer reads them from the signature); the body
# checks the options, plans the datasets and hands over to _evaluate.
@command(name="eval")
def eval_command(
    dataset: Annotated[list[str], typer.Option(
        "--dataset", "-d", help=f"Named dataset ({', '.join(NAMED_DATASETS)}) or a JSON file; "
                                "repeat for several.")] = ["cwq"],  # noqa: B006
    data_dir: Annotated[Path | None, typer.Option(
        help=f"Folder with trustmargin/, prag/, hipporag/ (default ${DATA_ENV}).")] = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = None,
    limit: Annotated[int | None, typer.Option(help="First N questions of each dataset.")
                     ] = None,
    top_k: Annotated[int, typer.Option(help="Passages per question.")] = 3,
    dtype: Annotated[str | None, typer.Option(help="float32 / bfloat16 (default: fp32 on CPU)")
                     ] = None,
    batch_size: Annotated[int, typer.Option(help="Questions per model call.")] = 8,
    run_dir: Annotated[Path | None, typer.Option(
        help="Where the cache and manifest live (default runs/<model>).")] = None,
    retrieval: Annotated[str, typer.Option(help="precomputed | bm25 | retriever")
                         ] = "precomputed",
    corpus: Annotated[Path | None, typer.Option(help="Corpus file for --retrieval bm25.")
                      ] = None,
    index: Annotated[Path | None, typer.Option(help="Saved BM25 index for --retrieval bm25.")
                     ] = None,
    retriever: Annotated[str | None, typer.Option(
        help="module:factory returning an object with search(query, k) (e.g. Elasticsearch)."
    )] = None,
    noise_limit: Annotated[int, typer.Option(
        help="Run the retrieval-noise experiment on the first N questions (0 = skip).")] = 0,
    noise_levels: Annotated[str, typer.Option(
        help="Comma-separated numbers of passages to replace (default 0..top-k).")] = "",
    noise_seed: Annotated[int, typer.Option(help="Seed of the noise injection.")] = 42,
    noise_corpus: Annotated[Path | None, typer.Option(
        help="Random passages come from this corpus (default: the dataset's passages).")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu / cuda (default: cuda if present)")
                      ] = None,
    report: Annotated[bool, typer.Option(help="Write RUN_DIR/report.md at the end.")] = True,
    pipeline: Annotated[str, typer.Option(
        help="Also run these RAG pipelines as candidates and arbitrate each against Direct, "
             "e.g. bm25,ircot,flare,clehe,dtr (bm25 is the main run).")] = "",
    pipeline_limit: Annotated[int | None, typer.Option(
        help="Run the pipelines on the first N questions of each dataset, taken in turn "
             "from each question type (default: all).")
    ] = None,
    pipeline_corpus: Annotated[Path | None, typer.Option(
        help="Corpus the pipelines search (default: every passage the dataset ships).")
    ] = None,
) -> None:
    """Evaluate Direct, BM25-RAG, TrustMargin, its ablations and the oracle (resumable)."""
    choice = backend_choice(backend, model, remote_url, remote_model, device=device,
                            dtype=dtype, concurrency=concurrency)
    settings = _check_options(
        backend=choice, limit=limit, top_k=top_k, batch_size=batch_size, run_dir=run_dir,
        noise_limit=noise_limit, noise_levels=noise_levels,
        noise_seed=noise_seed, noise_corpus=noise_corpus, pipeline=pipeline,
        pipeline_limit=pipeline_limit, pipeline_corpus=pipeline_corpus)
    # A data folder the environment gave is named by its variable in any error about it.
    named = {"data_dir": DATA_ENV} if not data_dir and os.environ.get(DATA_ENV) else {}
    data_dir = data_dir or (Path(os.environ[DATA_ENV]) if os.environ.get(DATA_ENV) else None)
    _guard_run_files(settings.run_dir, report, {
        **{f"--dataset {name}": Path(name) for name in dataset if Path(name).is_file()},
        "--corpus": corpus, "--noise-corpus": noise_corpus,
        "--pipeline-corpus": pipeline_corpus})
    # Data and retrieval are checked before the (slow) model load.
    plans = []
    for name in dataset:
        with variables_named(named):
            all_examples = load_dataset(name, data_dir)
        if not all_examples:
            raise InvalidInputError("--dataset", f"{name} holds no questions",
                                    "pass a dataset file with at least one question")
        examples = all_examples[:limit] if limit else all_examples
        source = _source(retrieval, name, data_dir, corpus, index, retriever)
        if isinstance(source, PrecomputedPassages):
            source.check(examples)
        plans.append((name, all_examples, examples, source))
    _evaluate(settings, plans)
    if report:
        from trustmargin_integrations.evaluation.report import build_report

        typer.echo(f"report: {shown(str(build_report(settings.run_dir)))}")


def _guard_run_files(run_dir: Path, report: bool, inputs: dict[str, Path | None]) -> None:
    """The output guard on every file ``eval`` writes in its run directory (it owns them):
    none may be a file the run reads, a link, a directory or a special file."""
    from trustmargin_integrations.evaluation.report.build import report_files
    from trustmargin_integrations.files import check_output
    from trustmargin_integrations.output_guard import run_files

    reads = {option: path for option, path in inputs.items() if path is not None}
    for path in [*run_files(run_dir), *(report_files(run_dir) if report else ())]:
        check_output(path, "--run-dir", inputs=reads)


def _check_options(*, backend: BackendChoice, limit: int | None, top_k: int, batch_size: int,
                   run_dir: Path | None, noise_levels: str, pipeline: str,
                   pipeline_limit: int | None, **rest: Any) -> _Settings:
    """Every option that needs no data, checked in the order a user reads them."""
    pipelines = []
    if pipeline:
        # The pipelines load torch-level code; only a run that uses them pays for it.
        from trustmargin_integrations.evaluation.pipeline_runner import parse_pipelines

        pipelines = parse_pipelines(pipeline)
    if pipeline_limit is not None and pipeline_limit < 1:
        raise InvalidInputError("--pipeline-limit", f"must be >= 1, got {pipeline_limit}",
                                "omit it to run the pipelines on every question")
    for name, value in (("--batch-size", batch_size), ("--top-k", top_k)):
        if value < 1:
            raise InvalidInputError(name, f"must be >= 1, got {value}", f"pass {name} 1 or more")
    if limit is not None and limit < 1:
        raise InvalidInputError("--limit", f"must be >= 1, got {limit}", "omit it for all")
    from trustmargin_integrations.evaluation.bootstrap import check_seed

    check_seed(rest["noise_seed"], "--noise-seed")
    items = [x.strip() for x in noise_levels.split(",") if x.strip()]
    # Digits only: int() would read "1_0" as 10 and "+1" as 1.
    if not all(x.isascii() and x.isdigit() for x in items):
        raise InvalidInputError("--noise-levels", f"{noise_levels!r} is not a list of integers",
                                "e.g. --noise-levels 0,1,2,3")
    levels = [int(x) for x in items] if noise_levels else list(range(top_k + 1))
    if any(not 0 <= lv <= top_k for lv in levels):
        raise InvalidInputError("--noise-levels", f"levels must be within 0..{top_k}",
                                "replace at most --top-k passages")
    run_dir = run_dir or Path("runs") / backend.model.replace("/", "_")
    if run_dir.exists() and not run_dir.is_dir():
        raise InvalidInputError("--run-dir", f"{run_dir} is a file, not a directory",
                                "pass a new or existing run directory")
    backend.check()
    return _Settings(backend=backend, top_k=top_k, batch_size=batch_size, run_dir=run_dir,
                     noise_levels=levels, pipelines=pipelines, pipeline_limit=pipeline_limit,
                     **rest)


def _evaluate(settings: _Settings,
              plans: list[tuple[str, list[EvalExample], list[EvalExample], PassageSource]],
              before: BeforeRun | None = None) -> None:
    """Load the backend once and run (or resume) every planned dataset; ``before(tm,
    examples, store, source)`` runs first for each (``check``'s plan and probe) and returns
    how many of the examples it computed into the store."""
    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.config import TrustMarginConfig
    from trustmargin_integrations.evaluation.rundir import chain_info, open_store, record_dataset

    s = settings
    # The paper's rule, explicitly: eval reproduces the paper (the shipped policy is what
    # `trustmargin check` concluded from such runs, not what they measure).
    tm = TrustMargin(s.backend.open(), TrustMarginConfig(top_k=s.top_k,
                                                         batch_size=s.batch_size,
                                                         scoring_form=s.scoring_form))
    engine = tm.backend.capabilities
    store = open_store(s.run_dir)
    command_line = shlex.join(["trustmargin", *sys.argv[1:]])
    for name, all_examples, examples, source in plans:
        typer.echo(f"{name}: {len(examples)} questions, "
                   f"{passages_shown(source, examples, s.top_k)}, "
                   f"model {tm.backend.model_id} ({model_dtype(tm)}) on {engine.kind}, "
                   f"run dir {shown(str(s.run_dir))}")
        # What the hook computed is in the store now: counted as computed, not as cached.
        probed = before(tm, examples, store, source) if before is not None else 0
        records = run_eval(tm, examples, store, source=source, top_k=s.top_k,
                           batch_size=s.batch_size)
        info = {"model": tm.backend.model_id, "dtype": model_dtype(tm),
                "backend": engine.kind, "backend_model": engine.model, "retrieval": source.name,
                "top_k": s.top_k, "batch_size": s.batch_size, "command": command_line,
                "first_id": examples[0].id, "last_id": examples[-1].id,
                "host": f"{platform.machine()}, {os.cpu_count()} CPU cores",
                **chain_info(examples, tm.config.scoring_form)}
        noise = []
        noise_info = None
        if s.noise_limit > 0:
            pool, pool_name = _noise_pool(all_examples, s.noise_corpus)
            noise = run_noise(tm, records[:s.noise_limit], store, pool=pool,
                              levels=s.noise_levels, seed=s.noise_seed, top_k=s.top_k,
                              batch_size=s.batch_size)
            noise_info = {"seed": s.noise_seed, "levels": s.noise_levels, "pool": pool_name,
                          "n": min(s.noise_limit, len(records))}
        piped, piped_info = _run_pipelines(tm, records, all_examples, store, s)
        record_dataset(s.run_dir, name, records, info, noise, noise_info, piped, piped_info)
        typer.echo(f"{name}: {sum(r.computed for r in records) + probed} computed, "
                   f"{sum(not r.computed for r in records) - probed} from cache")


def _retriever_from_spec(spec: str) -> object:
    """``package.module:factory`` -> ``factory()`` (e.g. an Elasticsearch retriever)."""
    factory = import_spec(spec, "--retriever", "mypkg.search:make_retriever")
    return factory() if callable(factory) else factory


def _source(retrieval: str, dataset: str, data_dir: Path | None, corpus: Path | None,
            index: Path | None, retriever: str | None) -> PassageSource:
    if retrieval == "precomputed":
        return PrecomputedPassages()
    if retrieval == "bm25":
        from trustmargin_integrations.retrieval.bm25 import BM25Index

        if index is not None:
            return RetrieverPassages(BM25Index.load(index), name=f"bm25:{index.name}")
        path = corpus or (corpus_path(dataset, data_dir) if data_dir else None)
        if path is None:
            raise InvalidInputError("--corpus", "is required for --retrieval bm25",
                                    "pass --corpus FILE (JSON/JSONL {title, text}) or --index DIR")
        return RetrieverPassages(BM25Index.from_corpus(path), name=f"bm25:{Path(path).name}")
    if retrieval == "retriever":
        if not retriever:
            raise InvalidInputError("--retriever", "is required for --retrieval retriever",
                                    "pass --retriever module:factory")
        return RetrieverPassages(_retriever_from_spec(retriever),  # type: ignore[arg-type]
                                 name=f"retriever:{retriever}")
    raise InvalidInputError("--retrieval", f"unknown mode {retrieval!r}",
                            "use precomputed, bm25 or retriever")


def _noise_pool(examples: list[EvalExample], corpus: Path | None) -> tuple[list[str], str]:
    if corpus is not None:
        from trustmargin_integrations.retrieval.corpus import load_corpus

        return [p.as_context() for p in load_corpus(corpus)], corpus.name
    pool = passage_pool(examples)
    if not pool:
        raise InvalidInputError("--noise-corpus", "is required: the dataset ships no passages",
                                "pass --noise-corpus FILE")
    return [p.as_context() for p in pool], "the dataset's own shipped passages"


def _run_pipelines(
    tm: object, records: list[EvalRecord], all_examples: list[EvalExample], store: object,
    s: _Settings,
) -> tuple[dict[str, list[PipelineRecord]], dict[str, dict[str, object]]]:
    """Run each planned pipeline on the first records of each type; results and manifest info."""
    if not s.pipelines:
        return {}, {}
    from trustmargin_integrations.evaluation.pipeline_runner import (
        first_of_each_type,
        run_pipeline,
    )
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    if s.pipeline_corpus is not None:
        index, source = BM25Index.from_corpus(s.pipeline_corpus), f"bm25:{s.pipeline_corpus.name}"
    else:
        pool = passage_pool(all_examples)
        if not pool:
            raise InvalidInputError("--pipeline-corpus", "is required: the dataset ships no "
                                    "passages to search", "pass --pipeline-corpus FILE")
        index, source = BM25Index.build(pool), "bm25 over the dataset's shipped passages"
    chosen = first_of_each_type(records, s.pipeline_limit, lambda r: r.example.meta.get("type", ""))
    out, info = {}, {}
    for name in s.pipelines:
        typer.echo(f"pipeline {name}: {len(chosen)} questions, retrieving from {source}")
        # Each pipeline retrieves as deep as the run's BM25-RAG (--top-k), so that the
        # candidates differ in how they use retrieval, not in how much evidence they see.
        out[name] = run_pipeline(tm, chosen, store, name=name,  # type: ignore[arg-type]
                                 retriever=index, top_k=s.top_k, params={"k": s.top_k},
                                 batch_size=s.batch_size)
        info[name] = {"params": out[name][0].decision.metadata["pipeline"]["params"]
                      if out[name] else {}, "retriever": source, "n": len(chosen)}
    return out, info
