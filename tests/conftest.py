"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import pytest

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend


@pytest.fixture(scope="session")
def backend() -> HFBackend:
    """The embedded SmolLM2-135M on CPU in fp32 (fast shared-prefix path on)."""
    return HFBackend.load("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tm(backend: HFBackend) -> TrustMargin:
    """A TrustMargin arbiter with the paper's default hyper-parameters."""
    return TrustMargin(backend)
