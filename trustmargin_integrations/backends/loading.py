"""``load_backend``: the one place that picks an engine for a model name, so that callers (the
arbiter, the CLI, the adapters) never import a concrete engine."""

from __future__ import annotations

from typing import Any

from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.errors import InvalidInputError


def load_backend(model: str = "smollm2-135m", **kwargs: Any) -> Backend:
    """The local transformers backend for a named model, a directory, a ``.gguf`` file or a
    Hugging Face id (``device``, ``dtype``, ``trust_remote_code``, ``fast`` go to it).

    Imported lazily: torch and transformers load only when a model does.
    """
    if not isinstance(model, str) or not model.strip():
        raise InvalidInputError("model", f"must be a model name, directory, .gguf file or "
                                f"Hugging Face id, got {model!r}",
                                "pass e.g. 'smollm2-135m' (see `trustmargin models`)")
    from trustmargin_integrations.backends.hf import HFBackend

    return HFBackend.load(model, **kwargs)
