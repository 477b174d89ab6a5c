"""The unit tier's guard (tests/unit/conftest.py) refuses sockets and model loading, and a
refusal fails the test even when the code under test swallows the error."""

from __future__ import annotations

import importlib
import socket

import pytest
from unit_tier import TierGuard, TierViolationError

from trustmargin_integrations.arbiter import TrustMargin


def test_a_connection_is_refused_and_recorded(tier_guard: TierGuard) -> None:
    with pytest.raises(TierViolationError, match=r"socket\.connect"):
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    assert tier_guard.violations == ["socket.connect()"]
    tier_guard.violations.clear()  # recorded as it should be: this test passes


def test_binding_a_port_is_refused(tier_guard: TierGuard) -> None:
    with socket.socket() as sock, pytest.raises(TierViolationError):
        sock.bind(("127.0.0.1", 0))
    assert tier_guard.violations == ["socket.bind()"]
    tier_guard.violations.clear()


def test_loading_the_embedded_model_is_refused(tier_guard: TierGuard) -> None:
    with pytest.raises(TierViolationError):
        TrustMargin.from_pretrained("smollm2-135m", calibration=None)
    assert tier_guard.violations, "the model loader ran in the unit tier"
    tier_guard.violations.clear()


def test_llama_cpp_is_refused(tier_guard: TierGuard) -> None:
    # Its import when it is not loaded yet, its Llama() in a process that loaded it (CI runs
    # the server tests and the unit tier in the same workers).
    with pytest.raises(ImportError):
        importlib.import_module("llama_cpp").Llama(model_path="model.gguf")
    assert tier_guard.violations in (["import llama_cpp"], ["llama_cpp.Llama()"])
    tier_guard.violations.clear()


def test_a_swallowed_refusal_is_still_recorded(tier_guard: TierGuard) -> None:
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=0.1)
    except OSError:
        pass  # what a retrying client does with a failed connection
    except ImportError:
        pass
    assert tier_guard.violations == ["socket.connect()"]
    tier_guard.violations.clear()
