"""One small question and the helpers the suites share to run ``score`` and the real command
on it: the JSONL writer, the job's settings, a model loader that counts its calls, and the
command in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations import TrustMargin, TrustMarginConfig
from trustmargin_integrations.score_file import key_settings

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
QUESTION = "Who designed the Zelvora Bridge?"
PASSAGE = "The Zelvora Bridge was designed by the engineer Marta Okonkwo in 1987."
GOOD = {"question": QUESTION, "passages": [PASSAGE], "direct_answer": "Gustave Eiffel",
        "rag_answer": "Marta Okonkwo"}


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    """The real command in its own process."""
    return subprocess.run([sys.executable, "-m", "trustmargin_integrations", *args],
                          env={**ENV, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, errors="replace")


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def score_settings(model: str = "smollm2-135m", **config: Any) -> dict[str, Any]:
    """The settings a ``score`` job keys its results on."""
    return key_settings(model, TrustMarginConfig(**config), dtype=None, device=None, remote=None)


class Loader:
    """``run_score``'s model loader, counting how often the job asked for the model."""

    def __init__(self, tm: TrustMargin | None) -> None:
        self.tm = tm
        self.calls = 0

    def __call__(self) -> TrustMargin:
        self.calls += 1
        if self.tm is None:
            pytest.fail("the job loaded the model although it had to stop before that")
        return self.tm


def decisions_in(path: Path) -> list[dict[str, Any]]:
    """The decisions of a ``score`` output, without their (varying) timings."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [{k: v for k, v in row.items() if k != "timings"} for row in rows]
