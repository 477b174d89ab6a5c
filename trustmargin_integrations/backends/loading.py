"""The backend factory: the one place that picks an engine.

Every command (``--backend``, or the ``--model`` / ``--remote-url`` shorthands), every API
entry point (``TrustMargin.from_pretrained``) and the adapters get their engine from
:func:`load_backend` (one spec) or :func:`load_backends` (one or several), so no caller
imports a concrete engine. A spec (:mod:`.spec`) names the engine and its model; engines are
imported lazily, so torch and transformers load only when a local model does.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.backends.spec import DEFAULT_MODEL, BackendSpec
from trustmargin_integrations.errors import InvalidInputError


def load_backend(spec: str | BackendSpec = DEFAULT_MODEL, *, device: str | None = None,
                 dtype: Any = None, max_concurrency: int | None = None,
                 field: str = "model", **engine_kwargs: Any) -> Backend:
    """The backend ``spec`` names (``hf:MODEL``, a bare model name, ``openai:URL#MODEL``).

    Args:
        spec: the spec, as text or parsed (:class:`~.spec.BackendSpec`).
        device: a local model's device (``hf`` only).
        dtype: a local model's dtype (``hf`` only).
        max_concurrency: requests in flight to a server (``openai`` only; default 8).
        field: the name errors about ``spec`` carry (``--backend`` on the command line).
        engine_kwargs: passed to the engine (``HFBackend.load``: ``trust_remote_code``,
            ``fast``, ``progress``; ``OpenAICompatBackend``: ``api_key``, ``timeout_s``,
            ``model_id``, ...).

    Raises:
        InvalidInputError: see :func:`check_backend`.
    """
    chosen = check_backend(spec, device=device, dtype=dtype, max_concurrency=max_concurrency,
                           field=field)
    if chosen.kind == "hf":
        from trustmargin_integrations.backends.hf import HFBackend

        _check_keywords(HFBackend.load, engine_kwargs, chosen)
        return HFBackend.load(chosen.model, device=device, dtype=dtype, **engine_kwargs)
    from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend

    _check_keywords(OpenAICompatBackend, engine_kwargs, chosen)
    return OpenAICompatBackend(chosen.url or "", chosen.model, tokenizer=chosen.tokenizer_source,
                               max_concurrency=max_concurrency or 8, **engine_kwargs)


def _check_keywords(engine: Any, given: dict[str, Any], spec: BackendSpec) -> None:
    """Refuse a keyword the engine does not take (named, with those it does), before it
    loads (``from_pretrained(foo=1)`` names ``foo``, not a TypeError from the engine)."""
    taken = [name for name, p in inspect.signature(engine).parameters.items()
             if p.kind is inspect.Parameter.KEYWORD_ONLY
             or p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    for name in given:
        if name not in taken:
            options = ", ".join(n for n in taken if n not in ("cls", "self", "model",
                                                             "base_url", "tokenizer"))
            raise InvalidInputError(name, f"is not an option of the backend {spec}",
                                    f"drop it; the backend takes {options}")


def recorded_model_id(spec: str | BackendSpec) -> str:
    """The ``model_id`` the backend ``spec`` names will record, before it loads (a
    calibration's model is checked against it before any load)."""
    chosen = BackendSpec.coerce(spec)
    if chosen.kind == "openai":
        return chosen.model
    from trustmargin_integrations.model_store import model_id_for

    return model_id_for(chosen.model)


def check_backend(spec: str | BackendSpec, *, device: str | None = None, dtype: Any = None,
                  max_concurrency: int | None = None, field: str = "model") -> BackendSpec:
    """``spec`` parsed, with every check :func:`load_backend` makes before it loads
    anything: the model source of a local model and its device; no option the engine has
    no use for (rather than dropping it silently).

    Raises:
        InvalidInputError: (named ``field``) a bad spec or model source; (``device``) a
            device this machine lacks; (``device``, ``dtype``) given for a server;
            (``concurrency``) given for a local model.
    """
    chosen = BackendSpec.coerce(spec, field)
    if chosen.kind == "hf":
        if max_concurrency is not None:
            raise InvalidInputError("concurrency", f"applies to a server, not to the local "
                                    f"model {chosen}", "drop it, or name a server: "
                                    "openai:URL#MODEL")
        check_model_source(chosen.model, field)
        check_device(device)
        return chosen
    for name, value in (("device", device), ("dtype", dtype)):
        if value is not None:
            raise InvalidInputError(name, f"applies to a local model, not to the server "
                                    f"{chosen}", f"drop {name}: the server chooses it")
    if max_concurrency is not None:
        from trustmargin_integrations.backends.openai_compat.settings import check_concurrency

        check_concurrency(max_concurrency, "concurrency")
    return chosen


def load_backends(specs: Sequence[str | BackendSpec], *, in_flight: int | None = None,
                  field: str = "model", **kwargs: Any) -> Backend:
    """One backend for one spec (:func:`load_backend`); for several servers, one fleet that
    spreads the requests over them (``Fleet(backends, in_flight=...)`` of
    :mod:`trustmargin_integrations.backends.fleet`).

    Raises:
        InvalidInputError: see :func:`check_backends`.
    """
    parsed = check_backends(specs, field=field, **kwargs)
    if len(parsed) == 1:
        return load_backend(parsed[0], field=field, **kwargs)
    from trustmargin_integrations.backends.fleet import Fleet

    members = [load_backend(spec, field=field, **kwargs) for spec in parsed]
    bound = {} if in_flight is None else {"in_flight": in_flight}  # else the fleet's default
    return Fleet(members, **bound)


def check_backends(specs: Sequence[str | BackendSpec], *, field: str = "model",
                   device: str | None = None, dtype: Any = None,
                   max_concurrency: int | None = None, **_engine_kwargs: Any
                   ) -> list[BackendSpec]:
    """The specs parsed and checked (:func:`check_backend`), loading nothing.

    Raises:
        InvalidInputError: no spec; several specs that are not all servers of one model (a
            fleet must give the decisions and cache keys one of its servers gives).
    """
    parsed = [check_backend(spec, device=device, dtype=dtype,
                            max_concurrency=max_concurrency, field=field) for spec in specs]
    if not parsed:
        raise InvalidInputError(field, "names no backend", f"pass e.g. {DEFAULT_MODEL!r}")
    if len(parsed) > 1 and (any(spec.kind != "openai" for spec in parsed)
                            or len({spec.model for spec in parsed}) > 1):
        raise InvalidInputError(field, "several backends must all be servers of the same "
                                f"model, got {', '.join(map(str, parsed))}",
                                "repeat it only for servers of one model: "
                                "openai:URL1#MODEL, openai:URL2#MODEL")
    return parsed


def check_model_source(model: Any, field: str = "model") -> str:
    """``model`` when it can name a model: a non-empty text, and a folder only if it holds a
    model (``config.json``; transformers would otherwise fail deep inside with a tokenizer
    error). Loads nothing.

    Raises:
        InvalidInputError: (named ``field``) not a name, or a folder without a model.
    """
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError(field, f"must be a model name, directory, .gguf file or "
                                f"Hugging Face id, got {model!r}",
                                "pass e.g. 'smollm2-135m' (see `trustmargin models`)")
    folder = Path(model)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise InvalidInputError(field, f"{folder} holds no model (no config.json)",
                                "pass a Hugging Face model folder, a .gguf file or a named "
                                "model (trustmargin models)")
    return model


def check_device(device: str | None) -> None:
    """Refuse a device torch cannot parse or this machine lacks, before any model loads (the
    rule is the local backend's own :func:`~.hf.backend.pick_device`)."""
    if device is None:
        return
    from trustmargin_integrations.backends.hf.backend import pick_device

    pick_device(device)


def cpu_threads(device: Any) -> int | None:
    """The CPU threads that compute a local model's numbers (``torch.get_num_threads()``),
    or None when ``device`` (a name, a ``torch.device`` or None for auto) is a GPU.

    Part of the cache key of every local result (``eval``, ``score``): the thread count
    changes the order of float reductions, so likelihoods move by about 1e-5 from one count
    to another, and a result computed with 16 threads must not be reused by a run with 1
    (its resumed output would no longer be the one an uninterrupted run gives). A GPU's
    numbers do not depend on it.
    """
    from trustmargin_integrations.extras import require_local_engine

    require_local_engine()  # before torch: the typed error that names the extra
    import torch

    from trustmargin_integrations.backends.hf.backend import numerics_threads, pick_device

    return numerics_threads(device if isinstance(device, torch.device) else pick_device(device))
