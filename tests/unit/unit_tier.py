"""The unit tier's guard: what counts as reaching for a socket or a model (see conftest.py)."""

from __future__ import annotations

import importlib.abc
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

# Importing either of these is the first step of loading a model in this package: the local
# engine (torch, transformers) and the llama.cpp server the system tests start.
MODEL_MODULES = ("trustmargin_integrations.backends.hf", "llama_cpp")


class TierViolationError(ImportError):
    """A unit test reached for a socket or a model (an ImportError, so that an import probe
    reads it as a missing module; the guard fails the test anyway)."""


class TierGuard(importlib.abc.MetaPathFinder):
    """Refuses sockets and model loading for one test, and remembers each refusal."""

    def __init__(self) -> None:
        self.violations: list[str] = []

    def refuse(self, what: str) -> TierViolationError:
        """Record ``what`` and return the error to raise."""
        self.violations.append(what)
        return TierViolationError(f"unit tier: {what} (no model, no socket here; use "
                                  "trustmargin_integrations.testing.ScriptedBackend, or move "
                                  "the test out of tests/unit)")

    def blocker(self, what: str) -> Callable[..., Any]:
        """A replacement for a forbidden call."""
        def blocked(*_args: Any, **_kwargs: Any) -> Any:
            raise self.refuse(what)
        return blocked

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> None:
        """Refuse importing a model engine that is not loaded yet."""
        if any(fullname == name or fullname.startswith(name + ".") for name in MODEL_MODULES):
            raise self.refuse(f"import {fullname}")
