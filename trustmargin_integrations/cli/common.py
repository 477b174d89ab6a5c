"""What several commands share: loading the arbiter from options, the rule options, the
retriever options, and small printing and writing helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trustmargin_integrations.cli.app import console
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError


def load_arbiter(model: str, device: str | None, dtype: str | None, *,
                 remote_url: str | None = None, remote_model: str | None = None,
                 concurrency: int = 8, calibration: Any = None, **config: Any) -> Any:
    """The TrustMargin the options describe: a local model, or a remote server's."""
    from trustmargin_integrations.arbiter import TrustMargin

    settings = config_from_options(**config)
    fitted = calibration_option(calibration, model, config)
    if remote_url:
        from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend

        backend = OpenAICompatBackend(remote_url, remote_model or model, tokenizer=model,
                                      max_concurrency=concurrency)
        if fitted is not None:
            return TrustMargin.calibrated(backend, fitted, settings)
        return TrustMargin(backend, settings)
    # The loader's and the backend's own checks, before anything loads (the CLI boundary
    # names their errors --model / --device).
    from trustmargin_integrations.backends import loading

    loading.check_model_source(model)
    loading.check_device(device)
    with console.status(f"loading {model} ..."):
        # Without --calibration the command applies the paper's rule (fitted is None), as
        # the demo and the paper's tables do; --calibration shipped loads the shipped policy.
        return TrustMargin.from_pretrained(model, device=device, dtype=dtype, config=settings,
                                           calibration=fitted)


def calibration_option(value: Any, model: str, config: dict[str, Any]) -> Any:
    """The calibration a --calibration option names (None without one; a loaded one as it
    is), before any model loads; giving --tau or --lambda-bind as well is ambiguous, so it
    is an error."""
    if value is None:
        return None
    from trustmargin_integrations.calibration import Calibration

    for key in ("tau", "lambda_bind"):
        if key in config:
            option = "--" + key.replace("_", "-")
            raise InvalidInputError(option, "cannot be combined with --calibration (the "
                                    "calibration sets it)", f"drop {option} or --calibration")
    return Calibration.coerce(value, model=model)


def calibration_path(value: str | None) -> Path | None:
    """The file a --calibration option reads (None without one, or for 'shipped'), so that
    the output guard never lets a command write over it."""
    from trustmargin_integrations.calibration import SHIPPED

    return None if value is None or value == SHIPPED else Path(value)


def config_from_options(**values: Any) -> TrustMarginConfig:
    """The config, with a bad option reported as the option the user typed."""
    try:
        return TrustMarginConfig(**values)
    except InvalidInputError as exc:
        option = "--" + exc.field.replace("_", "-")
        raise InvalidInputError(option, exc.problem, exc.fix) from None


def rule_options(tau: float | None, lambda_bind: float | None) -> dict[str, float]:
    """The decision rule's settings the user gave (the config's defaults otherwise)."""
    given = {"tau": tau, "lambda_bind": lambda_bind}
    return {k: v for k, v in given.items() if v is not None}


def open_retriever(corpus: Path | None, index: Path | None, elasticsearch: str | None = None,
                   es_index: str = "trustmargin") -> Any:
    """The one retriever --corpus, --index or --elasticsearch names."""
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    if [corpus, index, elasticsearch].count(None) != 2:
        raise InvalidInputError("--corpus/--index/--elasticsearch", "exactly one must be given",
                                "pass --corpus FILE (indexed on the fly), --index DIR or "
                                "--elasticsearch URL")
    if elasticsearch:
        from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchRetriever

        return ElasticsearchRetriever.connect(elasticsearch, index=es_index)
    return BM25Index.from_corpus(corpus) if corpus else BM25Index.load(index)  # type: ignore[arg-type]


def check_run_dir(run_dir: Path) -> None:
    """Read a run directory once, so that a corrupt or wrong-shaped manifest is one typed
    error naming it (the manifest reader in evaluation/rundir.py raises KeyError, TypeError
    or JSONDecodeError on one)."""
    from trustmargin_integrations.evaluation.rundir import MANIFEST_FILE, load_run

    try:
        load_run(run_dir)
    except TrustMarginError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError) as exc:
        raise InvalidInputError("RUN_DIR", f"{run_dir / MANIFEST_FILE} is corrupt or not a "
                                f"run manifest ({type(exc).__name__}: {exc})",
                                "re-run the `trustmargin eval` command that wrote it, or "
                                "restore the file") from None


def shorten(text: str, width: int = 48) -> str:
    """``text`` cut to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def signed(value: float | None) -> str:
    """A margin with its sign and two decimals (``-`` when there is none)."""
    return "-" if value is None else f"{value:+.2f}"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """One JSON object per line, through the one crash-safe writer (a full disk or a kill
    leaves the previous file intact)."""
    from trustmargin_integrations.files import atomic_output

    with atomic_output(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
