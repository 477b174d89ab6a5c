"""Shared fixtures: the real embedded model, loaded once per test session (once per worker
under ``pytest -n``), and the demo corpus as a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from trustmargin_integrations.demo import demo_corpus

if TYPE_CHECKING:
    from trustmargin_integrations.arbiter import TrustMargin
    from trustmargin_integrations.backends.hf import HFBackend


@pytest.fixture(scope="session")
def backend() -> HFBackend:
    """The embedded SmolLM2-135M on CPU in fp32 (fast shared-prefix path on)."""
    # Imported here, not at the top: the unit tier (tests/unit) collects without torch.
    from trustmargin_integrations.backends.hf import HFBackend

    return HFBackend.load("smollm2-135m", device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def tm(backend: HFBackend) -> TrustMargin:
    """A TrustMargin arbiter with the paper's default hyper-parameters."""
    from trustmargin_integrations.arbiter import TrustMargin

    return TrustMargin(backend)


@pytest.fixture(scope="session")
def demo_corpus_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo corpus written as a JSONL corpus file (``--corpus``)."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(p.model_dump()) + "\n" for p in demo_corpus()),
                    encoding="utf-8")
    return path
