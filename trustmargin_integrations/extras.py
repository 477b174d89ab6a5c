"""Which install extra a feature needs, checked before its heavy imports (pyproject.toml's
``[project.optional-dependencies]``; docs/architecture.md, "Install extras")."""

from __future__ import annotations

import importlib.util

from trustmargin_integrations.errors import MissingExtraError

LOCAL_ENGINE = ("torch", "transformers", "safetensors")
"""What the local engine imports (the ``local`` extra)."""


def installed(module: str) -> bool:
    """True when ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def require_local_engine(feature: str = "a local model") -> None:
    """Refuse a local-model feature on an install without the ``local`` extra.

    Raises:
        MissingExtraError: naming the missing packages, the extra, and the remote backend
            as the other way to score.
    """
    missing = [m for m in LOCAL_ENGINE if not installed(m)]
    if missing:
        raise MissingExtraError(
            "local", missing, feature,
            ", or score on a vLLM / llama.cpp server: --remote-url URL (the `remote` "
            "extra, OpenAICompatBackend)")
