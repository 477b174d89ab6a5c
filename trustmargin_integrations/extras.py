"""Which install extra a feature needs, checked before its heavy imports (pyproject.toml's
``[project.optional-dependencies]``; docs/architecture.md, "Install extras").

The base install is what wrapping a chain needs; each other path names its extra here, so a
user without it gets a :class:`~trustmargin_integrations.errors.MissingExtraError` naming the
``pip install`` line instead of a ``ModuleNotFoundError`` from deep inside an import.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from trustmargin_integrations.errors import MissingExtraError

LOCAL_ENGINE = ("torch", "transformers", "safetensors")
"""What the local engine imports (the ``local`` extra)."""

CLI = ("typer", "rich")
"""What the ``trustmargin`` command line imports (the ``cli`` extra; rich comes with typer)."""

BM25 = ("bm25s", "Stemmer")
"""What the embedded BM25 index imports (the ``bm25`` extra; ``Stemmer`` is PyStemmer)."""


def installed(module: str) -> bool:
    """True when ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        return False


def require(extra: str, modules: Sequence[str], feature: str, alternative: str = "") -> None:
    """Refuse ``feature`` on an install that lacks any of ``modules``.

    Args:
        extra: the install extra that brings them.
        modules: the top-level modules the feature imports.
        feature: what the user asked for, as the message's subject ("BM25Index").
        alternative: a clause appended to the fix (another way to get the feature).

    Raises:
        MissingExtraError: naming the missing modules and ``pip install
            'trustmargin-integrations[EXTRA]'``.
    """
    missing = [m for m in modules if not installed(m)]
    if missing:
        raise MissingExtraError(extra, missing, feature, alternative)


def require_local_engine(feature: str = "a local model") -> None:
    """Refuse a local-model feature on an install without the ``local`` extra.

    Raises:
        MissingExtraError: naming the missing packages, the extra, and the remote backend
            as the other way to score.
    """
    require("local", LOCAL_ENGINE, feature,
            ", or score on a vLLM / llama.cpp server: --remote-url URL (the `remote` "
            "extra, OpenAICompatBackend)")
