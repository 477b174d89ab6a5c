"""What several commands share: loading the arbiter from options, the rule options, the
retriever options, and small printing and writing helpers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustmargin_integrations.cli.app import console
from trustmargin_integrations.cli.boundary import shown
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError


@dataclass(frozen=True)
class BackendChoice:
    """The backend the options name (``--backend``, or the ``--model`` / ``--remote-url``
    shorthands) and the engine options that go with it, for the one factory."""

    specs: list[Any]
    option: str
    """The option that named the specs, which errors about them carry."""
    device: str | None = None
    dtype: str | None = None
    concurrency: int | None = None

    @property
    def model(self) -> str:
        """The (first) backend's model: what a local backend loads, a server's served name."""
        return str(self.specs[0].model)

    @property
    def local(self) -> bool:
        """True for a local model (numbers that depend on this machine's threads)."""
        return bool(self.specs[0].kind == "hf")

    def check(self) -> None:
        """Every check the factory makes before loading, named by the options."""
        from trustmargin_integrations.backends import loading

        with self._named_as_options():
            loading.check_backends(self.specs, field=self.option, device=self.device,
                                   dtype=self.dtype, max_concurrency=self.concurrency)

    def open(self) -> Any:
        """The backend (or fleet of servers) the specs name, through the one factory."""
        from trustmargin_integrations.backends import loading

        shown = ", ".join(map(str, self.specs))
        with self._named_as_options(), console.status(f"loading {shown} ..."):
            return loading.load_backends(self.specs, field=self.option,
                                         in_flight=self.concurrency, device=self.device,
                                         dtype=self.dtype, max_concurrency=self.concurrency)

    @contextmanager
    def _named_as_options(self) -> Iterator[None]:
        """The factory's errors about its keyword arguments named by their options."""
        try:
            yield
        except InvalidInputError as exc:
            if exc.field in ("device", "dtype", "concurrency"):
                raise InvalidInputError("--" + exc.field, exc.problem, exc.fix) from None
            raise


def backend_choice(backend: list[str] | None, model: str | None = None,
                   remote_url: str | None = None, remote_model: str | None = None, *,
                   device: str | None = None, dtype: str | None = None,
                   concurrency: int | None = None) -> BackendChoice:
    """The backend the options name: ``--backend`` (repeatable), or the older ``--model`` /
    ``--remote-url`` / ``--remote-model`` shorthands (never both). Loads nothing."""
    from trustmargin_integrations.backends.spec import BackendSpec

    engine = {"device": device, "dtype": dtype, "concurrency": concurrency}
    if backend:
        for option, value in (("--model", model), ("--remote-url", remote_url),
                              ("--remote-model", remote_model)):
            if value is not None:
                raise InvalidInputError(option, "cannot be combined with --backend (the "
                                        "backend names the model)", f"drop {option}, or "
                                        "--backend: e.g. --backend openai:URL#MODEL")
        return BackendChoice([BackendSpec.parse(text, "--backend") for text in backend],
                             "--backend", **engine)
    spec = BackendSpec.from_shorthand(model, remote_url, remote_model)
    return BackendChoice([spec], "--remote-url" if remote_url else "--model", **engine)


def load_arbiter(choice: BackendChoice, *, calibration: Any = None, **config: Any) -> Any:
    """The TrustMargin the options describe, on the backend they name."""
    from trustmargin_integrations.arbiter import TrustMargin

    settings = config_from_options(**config)
    # A bad --calibration fails before anything loads. Without one the command applies the
    # paper's rule, as the demo and the paper's tables do; 'shipped' loads the shipped policy.
    fitted = calibration_option(calibration, choice.model, config)
    choice.check()
    if fitted is not None:
        from trustmargin_integrations.backends.loading import recorded_model_id
        from trustmargin_integrations.prompts import PROMPT_VERSION

        # The file's model and numbers, before the model loads (they failed 9 s in).
        fitted.checked_config(recorded_model_id(choice.specs[0]), PROMPT_VERSION, settings)
    backend = choice.open()
    if fitted is not None:
        return TrustMargin.calibrated(backend, fitted, settings)
    return TrustMargin(backend, settings)


def calibration_option(value: Any, model: str, config: dict[str, Any]) -> Any:
    """The policy file a --calibration option names (None without one; a loaded one as it
    is), before any model loads; giving --tau or --lambda-bind as well is ambiguous, so it
    is an error."""
    if value is None:
        return None
    from trustmargin_integrations.policy_file import PolicyFile

    for key in ("tau", "lambda_bind"):
        if key in config:
            option = "--" + key.replace("_", "-")
            raise InvalidInputError(option, "cannot be combined with --calibration (the "
                                    "policy file sets the policy and its numbers)",
                                    f"drop {option} or --calibration")
    return PolicyFile.coerce(value, model=model)


def usage_line(calibration: Any, path: Path) -> str:
    """How to load a fitted file: on the backend it was fitted on (a server's spec for a
    file fitted on one)."""
    model = calibration.model_id
    if calibration.backend_kind == "openai":
        model = f"openai:URL#{calibration.backend_model or model}"
    return (f"use it: TrustMargin.from_pretrained({model!r}, calibration={str(path)!r}), or "
            f"--calibration {shown(str(path))}")


def calibration_path(value: str | None) -> Path | None:
    """The file a --calibration option reads (None without one, or for 'shipped'), so that
    the output guard never lets a command write over it."""
    from trustmargin_integrations.policy_file import SHIPPED

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
    return BM25Index.from_corpus(corpus) if corpus else BM25Index.load(index)


def check_run_dir(run_dir: Path) -> None:
    """Read a run directory once, so that a corrupt or wrong-shaped manifest is one typed
    error naming it (the manifest reader in evaluation/rundir.py raises KeyError, TypeError
    or JSONDecodeError on one)."""
    from trustmargin_integrations.evaluation.rundir import load_run
    from trustmargin_integrations.output_guard import MANIFEST_FILE

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


def import_spec(spec: str, option: str, example: str) -> Any:
    """The object ``package.module:attr`` names (``option``'s value), imported; a typed
    error naming ``option`` when the spec, the module or the attribute is wrong."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidInputError(option, f"{spec!r} is not 'module:attribute'",
                                f"e.g. {option} {example}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(option, f"module {module_name!r} cannot be imported "
                                f"({exc})", "install it, fix the module path, or put its "
                                "folder on PYTHONPATH") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise InvalidInputError(option, f"module {module_name!r} has no {attr!r}",
                                "name an attribute the module defines") from None


@dataclass(frozen=True)
class LoadedBackend(BackendChoice):
    """A backend already loaded (the scorer a caller passed, or one loaded to run a chain
    check): the commands that take a :class:`BackendChoice` check and load nothing again."""

    loaded: Any = None

    @property
    def model(self) -> str:
        """The loaded backend's model id."""
        return str(self.loaded.model_id)

    @property
    def local(self) -> bool:
        """True for a local model."""
        return bool(getattr(self.loaded.capabilities, "kind", "hf") == "hf")

    def check(self) -> None:
        """Nothing to check: it is loaded."""

    def open(self) -> Any:
        """The loaded backend itself."""
        return self.loaded
