"""``load_backend``: the one place that picks an engine for a model name, so that callers (the
arbiter, the CLI, the adapters) never import a concrete engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError


def load_backend(model: str = "smollm2-135m", **kwargs: Any) -> Backend:
    """The local transformers backend for a named model, a directory, a ``.gguf`` file or a
    Hugging Face id (``device``, ``dtype``, ``trust_remote_code``, ``fast`` go to it).

    Imported lazily: torch and transformers load only when a model does.
    """
    check_model_source(model)
    from trustmargin_integrations.backends.hf import HFBackend

    return HFBackend.load(model, **kwargs)


def check_model_source(model: Any) -> str:
    """``model`` when it can name a model: a non-empty text, and a folder only if it holds a
    model (``config.json``; transformers would otherwise fail deep inside with a tokenizer
    error). Loads nothing.

    Raises:
        InvalidInputError: (field ``model``) not a name, or a folder without a model.
    """
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("model", f"must be a model name, directory, .gguf file or "
                                f"Hugging Face id, got {model!r}",
                                "pass e.g. 'smollm2-135m' (see `trustmargin models`)")
    folder = Path(model)
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise InvalidInputError("model", f"{folder} holds no model (no config.json)",
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

    from trustmargin_integrations.backends.hf.backend import pick_device

    chosen = device if isinstance(device, torch.device) else pick_device(device)
    return torch.get_num_threads() if chosen.type == "cpu" else None
