"""The unit tier: no model, no socket. Every test here runs under :class:`~unit_tier.TierGuard`,
which fails a test that opens a network connection, binds a port or loads a model, even when
the code under test catches the error it raises (the violation is recorded and the test fails
at teardown). Tests use :class:`~trustmargin_integrations.testing.ScriptedBackend` instead.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest
from unit_tier import TierGuard


@pytest.fixture(autouse=True)
def tier_guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[TierGuard]:
    """The guard of the running test (autouse: every unit test runs under it)."""
    guard = TierGuard()
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, guard.blocker(f"socket.{name}()"))
    # In a process that already ran integration tests (CI runs every tier), the engines are
    # imported: block their loaders instead of their import.
    hf = sys.modules.get("trustmargin_integrations.backends.hf.backend")
    if hf is not None:
        monkeypatch.setattr(hf.HFBackend, "load",
                            classmethod(guard.blocker("HFBackend.load()")))
        monkeypatch.setattr(hf, "_load_causal_lm", guard.blocker("loading a causal LM"))
    llama = sys.modules.get("llama_cpp")
    if llama is not None:
        monkeypatch.setattr(llama, "Llama", guard.blocker("llama_cpp.Llama()"))
    monkeypatch.setattr(sys, "meta_path", [guard, *sys.meta_path])
    yield guard
    if guard.violations:
        pytest.fail("unit tier violated: " + "; ".join(guard.violations), pytrace=False)
