"""``trustmargin check``: which policy to run on your domain, from your labeled questions.

Input: an eval run directory (as ``calibrate`` takes), or a labeled JSON / JSONL file of
``{question, answer | answers, passages}`` records (with ``--corpus`` / ``--index`` when the
records have no passages). A file is generated and scored once into a resumable run
directory by ``eval``'s own machinery; then the domain check
(:mod:`trustmargin_integrations.evaluation.domain_check`) chooses the policy, prints its
one-line verdict and the candidates, and writes the policy as a policy file.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import shown
from trustmargin_integrations.cli.common import (
    BackendChoice,
    LoadedBackend,
    backend_choice,
    check_run_dir,
    usage_line,
)
from trustmargin_integrations.cli.options import (
    BackendOpt,
    ConcurrencyOpt,
    ModelOpt,
    ObjectiveOpt,
    RemoteModelOpt,
    RemoteUrlOpt,
)
from trustmargin_integrations.config import DEFAULT_SCORING_FORM, ScoringForm
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import check_output
from trustmargin_integrations.policy_file import check_objective

if TYPE_CHECKING:
    from trustmargin_integrations.evaluation.datasets import EvalExample
    from trustmargin_integrations.evaluation.domain_check import PolicyCheckResult
    from trustmargin_integrations.evaluation.work_plan import Plan
    from trustmargin_integrations.policy_file import PolicyFile


# Long only by its option declarations (typer reads them from the signature).
@command()
def check(
    labeled: Annotated[Path, typer.Argument(
        help="Your labeled questions (JSON or JSONL of {question, answer|answers, passages}) "
             "or a directory written by `trustmargin eval`.")],
    corpus: Annotated[Path | None, typer.Option(
        help="Retrieve each question's passages from this corpus with BM25 (JSON/JSONL "
             "{title, text}) when the records carry none.")] = None,
    index: Annotated[Path | None, typer.Option(
        help="A saved BM25 index to retrieve from (instead of --corpus).")] = None,
    backend: BackendOpt = None,
    model: ModelOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = None,
    top_k: Annotated[int, typer.Option(help="Passages per question.")] = 3,
    dtype: Annotated[str | None, typer.Option(help="float32 / bfloat16 (default: fp32 on CPU)")
                     ] = None,
    device: Annotated[str | None, typer.Option(help="cpu / cuda (default: cuda if present)")
                      ] = None,
    batch_size: Annotated[int, typer.Option(help="Questions per model call.")] = 8,
    run_dir: Annotated[Path | None, typer.Option(
        help="Where the answers and scores are cached (default <file>.check; resumable).")
    ] = None,
    out: Annotated[Path | None, typer.Option(
        help="Policy file to write (default RUN_DIR/policy.json).")] = None,
    objective: ObjectiveOpt = "f1",
    folds: Annotated[int, typer.Option(help="Folds of both cross-validation levels.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the folds and the bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 10_000,
    holdout: Annotated[float, typer.Option(
        help="Share of each dataset set aside before choosing, used only to score the chosen "
             "policy on unseen questions (0 = choose on all).")] = 0.0,
    split_seed: Annotated[int, typer.Option(help="Seed of the --holdout split.")] = 0,
    scoring_form: Annotated[str | None, typer.Option(
        help="For records that give their chain's own answers (direct_answer, rag_answer): "
             "how the two texts are compared: auto (default: extract with a scorer of 1B "
             "parameters or more, else differential), differential, extract or paper.")
    ] = None,
    limit: Annotated[int | None, typer.Option(
        help="Check only the first N distinct questions of the file.")] = None,
    yes: Annotated[bool, typer.Option(
        "--yes", help="Run a large file (over 1,000 questions) without asking.")] = False,
    chain: Annotated[str | None, typer.Option(
        help="MODULE:ATTR of your chain (a LangChain Runnable or a LlamaIndex query engine, "
             "or a function returning one): run it on LABELED closed-book and as deployed "
             "(resumable), record both answers and its passages, then check them.")] = None,
) -> None:
    """Check your domain first: keep TrustMargin, or plain RAG (or Direct), from your own
    labeled questions, with nested cross-validation and paired intervals.

    Records that carry your chain's own two answers (``direct_answer``: the chain run without
    retrieval, ``rag_answer``: with it) are checked on those texts, compared under
    ``--scoring-form`` and graded whole; records without them on the model's own short
    answers, generated with the paper's prompts.

    With ``--chain MODULE:ATTR`` your chain gives those two answers itself: it is run on
    each labeled question as deployed and closed-book (TrustMargin's own closed-book copy of
    it), with progress, resumably, into RUN_DIR, and then checked.

    Load the result with ``TrustMargin.from_pretrained(model, calibration=FILE)`` or
    ``--calibration FILE``.
    """
    choice = backend_choice(backend, model, remote_url, remote_model, device=device,
                            dtype=dtype, concurrency=concurrency)
    run_check(labeled, choice=choice, chain=chain, corpus=corpus, index=index, top_k=top_k,
              batch_size=batch_size, run_dir=run_dir, out=out, objective=objective,
              folds=folds, seed=seed, resamples=resamples, holdout=holdout,
              split_seed=split_seed, scoring_form=scoring_form, limit=limit, yes=yes)


# Long only by the check's options, passed through in the order the command declares them.
def run_check(labeled: Path, *, choice: BackendChoice, chain: Any = None,
              corpus: Path | None = None, index: Path | None = None, top_k: int = 3,
              batch_size: int = 8, run_dir: Path | None = None, out: Path | None = None,
              objective: str = "f1", folds: int = 5, seed: int = 0,
              resamples: int = 10_000, holdout: float = 0.0, split_seed: int = 0,
              scoring_form: str | None = None, llm: Any = None, progress: bool = True,
              limit: int | None = None, yes: bool = False) -> CheckOutcome:
    """``trustmargin check`` itself, for the command and :func:`check_chain`: check the
    options, answer and score the labeled file (with ``chain``, a ``MODULE:ATTR`` spec or
    the chain object, running the chain first), choose the policy, print, write it.
    """
    from trustmargin_integrations.evaluation.bootstrap import check_resamples, check_seed
    from trustmargin_integrations.evaluation.calibrate_command import LoadedRun
    from trustmargin_integrations.evaluation.check_command import (
        check_run,
        describe_check,
        next_step,
    )
    from trustmargin_integrations.output_guard import guard_output

    check_resamples(resamples, "--resamples")  # before any model or file work
    check_seed(seed, "--seed")
    check_seed(split_seed, "--split-seed")
    objective = check_objective(objective, "--objective")
    if folds < 2:
        raise InvalidInputError("--folds", f"must be >= 2, got {folds}", "use 5 (the default)")
    if not 0 <= holdout < 1:
        raise InvalidInputError("--holdout", f"must be in [0, 1), got {holdout}",
                                "use 0 (choose on all questions) or e.g. 0.5")
    from_file = not labeled.is_dir()
    if chain is not None and (not from_file or corpus is not None or index is not None):
        raise InvalidInputError("--chain", "runs your chain on a labeled file, which gives "
                                "the passages (its retriever's)", "pass a labeled JSON / "
                                "JSONL file, without --corpus, --index or a run directory")
    target_dir = (run_dir or labeled.with_name(labeled.name + ".check")) if from_file \
        else labeled
    # Before any work: the policy file never replaces an input or the run's own files.
    target = guard_output(out or target_dir / "policy.json", "--out", run_dir=target_dir,
                          inputs=_inputs(labeled if from_file else None, corpus, index),
                          protected=_chain_files(target_dir) if chain is not None else None)
    form = _scoring_form(scoring_form)
    name = labeled.stem
    if chain is not None:
        labeled, choice = _answer_with_chain(chain, labeled, target_dir, choice=choice,
                                             llm=llm, top_k=top_k, batch_size=batch_size,
                                             folds=folds, holdout=holdout,
                                             split_seed=split_seed, progress=progress,
                                             limit=limit, yes=yes)
    if from_file:
        _generate_and_score(labeled, target_dir, name=name, corpus=corpus, index=index,
                            passages_fix=_NO_PASSAGES if chain is None else _CHAIN_NO_PASSAGES,
                            backend=choice,
                            top_k=top_k, batch_size=batch_size,
                            folds=folds, holdout=holdout, split_seed=split_seed,
                            scoring_form=form, limit=limit, yes=yes)
    elif form is not None:
        raise InvalidInputError("--scoring-form", "applies when records are answered and "
                                "scored, not to a run directory already scored",
                                "leave it out (the run's manifest says how it was compared)")
    check_run_dir(target_dir)
    loaded = LoadedRun.read(target_dir)
    if loaded.repeats:
        typer.echo(f"warning: {shown(loaded.repeats)}", err=True)
    result, calibration = check_run(loaded, objective=objective,
                                    folds=folds, seed=seed, resamples=resamples,
                                    holdout=holdout, split_seed=split_seed)
    for line in describe_check(result, calibration):
        typer.echo(line)
    path = calibration.save(target)
    typer.echo(f"policy: {shown(str(path))}")
    typer.echo(next_step(calibration, loaded) or usage_line(calibration, path))
    return CheckOutcome(result=result, calibration=calibration, policy=path,
                        run_dir=target_dir)


@dataclass(frozen=True)
class CheckOutcome:
    """What a check concluded: the check's result (verdict, candidates, nested estimate),
    the policy file written (the chosen policy), its path and the run directory."""

    result: PolicyCheckResult
    calibration: PolicyFile
    policy: Path
    run_dir: Path


def _answer_with_chain(chain: Any, labeled: Path, run_dir: Path, *, choice: BackendChoice,
                       llm: Any, top_k: int, batch_size: int, folds: int, holdout: float,
                       split_seed: int, progress: bool, limit: int | None = None,
                       yes: bool = False) -> tuple[Path, BackendChoice]:
    """Run the chain on the labeled file's distinct questions both ways (resumably, in
    ``run_dir``) and write the records the check reads; every refusal the check would make
    later is made before the chain or the scorer runs. Returns the records file and the
    scorer, loaded once for the chain's adapter and the scoring."""
    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.cli import chain_answers
    from trustmargin_integrations.config import TrustMarginConfig
    from trustmargin_integrations.evaluation.datasets import load_examples

    examples = load_examples(labeled)
    chain_answers.refuse_given(examples, labeled)
    examples, _ = _planned(examples, labeled, scoring_form=None, folds=folds,
                           holdout=holdout, split_seed=split_seed, limit=limit, yes=yes)
    records = check_output(run_dir / chain_answers.RECORDS_FILE, "--run-dir",
                           inputs={"LABELED": labeled})
    if isinstance(chain, str):
        chain = chain_answers.load_chain(chain)
    choice.check()
    tm = TrustMargin(choice.open(), TrustMarginConfig(top_k=top_k, batch_size=batch_size))
    answering = chain_answers.answerer(chain, tm, llm=llm)
    answers = chain_answers.answer_all(answering, examples, run_dir, progress=progress)
    chain_answers.write_records(examples, answers, records)
    typer.echo(f"{labeled.name}: {len(examples)} questions answered by {answering.label}, "
               f"closed-book and as deployed; records {shown(str(records))}")
    return records, LoadedBackend(specs=[], option=choice.option, loaded=tm.backend)


_NO_PASSAGES = ("give every record non-blank passages, or pass --corpus FILE or --index DIR "
                "to retrieve them with BM25")
_CHAIN_NO_PASSAGES = ("your chain's retriever returned no documents for this question: make it "
                      "return some, or remove the question")


def _scoring_form(value: str | None) -> ScoringForm | None:
    """``--scoring-form`` checked against the config's forms (None: not given)."""
    forms = get_args(ScoringForm)
    if value is not None and value not in forms:
        raise InvalidInputError("--scoring-form", f"must be one of {', '.join(forms)}, got "
                                f"{value!r}", "pass --scoring-form auto (the default)")
    return value  # type: ignore[return-value]


def _chain_files(run_dir: Path) -> dict[Path, str]:
    """The files ``--chain`` writes in the run directory, which ``--out`` must not replace."""
    from trustmargin_integrations.cli.chain_answers import ANSWERS_FILE, RECORDS_FILE

    return {run_dir / ANSWERS_FILE: "your chain's stored answers",
            run_dir / RECORDS_FILE: "the records of your chain's answers"}


def _inputs(labeled: Path | None, corpus: Path | None, index: Path | None
            ) -> dict[str, Path | None]:
    """The files ``check`` reads (option -> path), which its output must never replace."""
    inputs: dict[str, Path | None] = {"LABELED": labeled, "--corpus": corpus}
    if index is not None:
        from trustmargin_integrations.retrieval.bm25 import BM25Index

        inputs.update({f"--index ({path.name})": path for path in BM25Index.files(index)})
    return inputs


def _planned(examples: list[EvalExample], labeled: Path, *, scoring_form: ScoringForm | None,
             folds: int, holdout: float, split_seed: int, limit: int | None = None,
             yes: bool = False) -> tuple[list[EvalExample], bool]:
    """The distinct questions of a labeled file the check will use (the first ``limit``),
    every refusal it would make after generating made now: no questions, records mixing the
    chain's answers and none, ``--scoring-form`` without chain answers, too few questions for
    the folds, a large run without ``--yes`` or ``--limit`` where nobody can be asked. Also
    whether a person is to be asked once the plan is shown."""
    from trustmargin_integrations.evaluation.check_command import check_plan
    from trustmargin_integrations.evaluation.distinct import Distinct
    from trustmargin_integrations.evaluation.work_plan import require_consent

    if not examples:
        raise InvalidInputError(str(labeled), "holds no questions",
                                "label a few dozen to a few hundred questions of your domain")
    chained = [e.chain is not None for e in examples]
    if any(chained) and not all(chained):
        first = chained.index(not chained[0])
        raise InvalidInputError(f"{labeled.name}: record {first + 1}", "gives no chain answers "
                                "(direct_answer, rag_answer) while earlier records do"
                                if chained[0] else "gives its chain's answers while earlier "
                                "records do not", "check a chain's answers and the model's own "
                                "in two files")
    if scoring_form is not None and not any(chained):
        raise InvalidInputError("--scoring-form", "applies to records that give their "
                                "chain's answers (direct_answer, rag_answer); these give none",
                                "leave it out, or add your chain's two answers to the records")
    distinct = Distinct.of([e.question for e in examples])
    repeats = distinct.warning([e.id for e in examples])
    if repeats:
        typer.echo(f"warning: {shown(repeats)}", err=True)
    examples = [examples[i] for i in distinct.kept][:limit]
    ask = require_consent(len(examples), yes=yes, limited=limit is not None,
                          interactive=sys.stdin.isatty())
    check_plan([e.dataset for e in examples], [e.id for e in examples], folds=folds,
               holdout=holdout, split_seed=split_seed, where=str(labeled))
    return examples, ask


def _generate_and_score(labeled: Path, run_dir: Path, *, name: str, corpus: Path | None,
                        index: Path | None, backend: BackendChoice, top_k: int,
                        batch_size: int, folds: int, holdout: float,
                        split_seed: int, scoring_form: ScoringForm | None,
                        passages_fix: str, limit: int | None = None,
                        yes: bool = False) -> None:
    """Answer and score the labeled file once into ``run_dir`` with ``eval``'s machinery
    (a second call reads the cache). Each distinct question is answered once, and every
    refusal the check would make after generating (too few questions, repeated ids under
    --holdout, records without passages) is made before the model loads."""
    from trustmargin_integrations.cli.evaluate import _check_options, _evaluate, _source
    from trustmargin_integrations.evaluation.datasets import load_examples
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages
    from trustmargin_integrations.evaluation.work_plan import probe_plan

    settings = _check_options(
        backend=backend, limit=limit, top_k=top_k, batch_size=batch_size, run_dir=run_dir,
        noise_limit=0, noise_levels="", noise_seed=0,
        noise_corpus=None, pipeline="", pipeline_limit=None, pipeline_corpus=None,
        scoring_form=scoring_form or DEFAULT_SCORING_FORM)
    examples, ask = _planned(load_examples(labeled), labeled, scoring_form=scoring_form,
                             folds=folds, holdout=holdout, split_seed=split_seed,
                             limit=limit, yes=yes)
    if corpus is not None or index is not None:
        source = _source("bm25", name, None, corpus, index, None)
    else:
        source = PrecomputedPassages(passages_fix)
        source.check(examples)
    _evaluate(settings, [(name, examples, examples, source)],
              before=lambda tm, todo, store, source: _state_plan(
                  probe_plan(tm, todo, store, source=source, top_k=top_k,
                             batch_size=batch_size), ask))


def _state_plan(plan: Plan, ask: bool) -> int:
    """Print the plan before the work; at a terminal, a large run asks to go on. Returns
    the questions the probe computed."""
    typer.echo(plan.line())
    if ask and not typer.confirm(f"answer all {plan.questions:,} questions?", default=False):
        raise InvalidInputError("--yes", "the run was not confirmed", "pass --limit N to "
                                "check the first N questions, or --yes to run them all")
    return plan.probe_computed
