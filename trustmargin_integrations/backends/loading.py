"""``load_backend``: the one place that picks an engine for a model name, so that callers (the
arbiter, the CLI, the adapters) never import a concrete engine."""

from __future__ import annotations

from typing import Any

from trustmargin_integrations.backends.base import Backend


def load_backend(model: str = "smollm2-135m", **kwargs: Any) -> Backend:
    """The local transformers backend for a named model, a directory, a ``.gguf`` file or a
    Hugging Face id (``device``, ``dtype``, ``trust_remote_code``, ``fast`` go to it).

    Imported lazily: torch and transformers load only when a model does.
    """
    from trustmargin_integrations.backends.hf import HFBackend

    return HFBackend.load(model, **kwargs)
