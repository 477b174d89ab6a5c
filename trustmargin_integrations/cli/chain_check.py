"""``check_chain``: ``trustmargin check --chain`` from Python, on the chain object itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trustmargin_integrations.cli.check import CheckOutcome, run_check
from trustmargin_integrations.cli.common import LoadedBackend

if TYPE_CHECKING:
    from trustmargin_integrations.arbiter import TrustMargin


def check_chain(chain: Any, labeled: str | Path, *, tm: TrustMargin | None = None,
                llm: Any = None, run_dir: str | Path | None = None,
                out: str | Path | None = None, objective: str = "f1", folds: int = 5,
                seed: int = 0, resamples: int = 10_000, holdout: float = 0.0,
                split_seed: int = 0, scoring_form: str | None = None, top_k: int = 3,
                batch_size: int = 8, progress: bool = True) -> CheckOutcome:
    """Check your domain on your own chain in one step: run ``chain`` on each labeled
    question as deployed and closed-book, record both answers and the passages it
    retrieved, decide on them with ``trustmargin check``'s nested cross-validation, and
    write the policy (what ``trustmargin check --chain MODULE:ATTR LABELED`` does).

    The closed-book run is TrustMargin's own: for a LangChain Runnable, the drop-in's copy
    of your chain whose retriever returns no documents (:func:`with_trustmargin`); for a
    LlamaIndex query engine, its own LLM (or ``llm``) asked the question alone, as
    ``TrustMarginQueryEngine`` asks it. The chain's answers are stored in ``run_dir`` as
    they come, with a progress bar: a rerun after a crash runs the chain only on the
    questions not answered yet (a run directory holds one chain's answers: use a new one
    for a changed chain). The verdict and the candidates are printed as the command prints
    them; a warning names both models when the chain does not answer with the scorer.

    Args:
        chain: a LangChain Runnable with a retriever in it, or a LlamaIndex query engine.
        labeled: JSON / JSONL of ``{question, answer | answers}``, a LangSmith dataset
            export or a LlamaIndex dataset file, without passages or chain answers (the
            chain gives both).
        tm: the scorer (default ``TrustMargin.from_pretrained()``, the embedded model).
        llm: for a query engine, the LLM asked closed-book (default: the engine's).
        run_dir: where the chain's answers, the records and the scores are kept (default
            ``<labeled>.check``); out: the policy file (default ``run_dir/policy.json``).
        objective, folds, seed, resamples, holdout, split_seed, scoring_form: as
            ``trustmargin check`` takes them.
        top_k, batch_size: passages per question scored, questions per scoring call.
        progress: show the progress bars.

    Returns:
        The check's result, the policy file written (the chosen policy), its path and
        the run directory.

    Raises:
        InvalidInputError: a bad option, a labeled record that is bad or already carries
            passages or chain answers, too few questions for ``folds``, a chain of another
            kind, before the chain runs.
    """
    if tm is None:
        from trustmargin_integrations.arbiter import TrustMargin

        tm = TrustMargin.from_pretrained()
    return run_check(Path(labeled), choice=LoadedBackend(specs=[], option="tm",
                                                         loaded=tm.backend),
                     chain=chain, llm=llm, run_dir=None if run_dir is None else Path(run_dir),
                     out=None if out is None else Path(out), objective=objective,
                     folds=folds, seed=seed, resamples=resamples, holdout=holdout,
                     split_seed=split_seed, scoring_form=scoring_form, top_k=top_k,
                     batch_size=batch_size, progress=progress)
