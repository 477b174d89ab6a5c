"""A remote-only install scores without torch or transformers (issue 25).

tests/torch_free_flow.py runs the remote user's path (``ask`` and ``score`` with
``--remote-url``, a LangChain chain with ``with_trustmargin``, the typed error for a local
model) against a REAL llama.cpp server (tests/llama_cpp_server.py) in a child interpreter
that cannot import torch or transformers:

* in the normal test run, this interpreter with an import blocker for both (the checkout
  under test first on the path), so the property is guarded on every run;
* with ``$TRUSTMARGIN_TORCH_FREE_PYTHON`` set (.ci/torch_free.sh), the python of a fresh
  venv built with only ``pip install '.[remote,langchain,cli]'``: there both are truly absent,
  and the package is the one pip installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_cpp_server import LlamaCppServer

from trustmargin_integrations.model_store import REGISTRY

pytestmark = [pytest.mark.slow, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[1]
FLOW = ROOT / "tests" / "torch_free_flow.py"
PYTHON_ENV = "TRUSTMARGIN_TORCH_FREE_PYTHON"

# Raised for torch and transformers before any other finder looks: what an install without
# them answers (ModuleNotFoundError, which optional imports elsewhere already expect).
BLOCKER = """
import importlib.abc, runpy, sys

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None
sys.meta_path.insert(0, NoTorch())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaCppServer]:
    with LlamaCppServer(REGISTRY["smollm2-135m"].locate(), alias="smollm2-135m", n_ctx=512,
                        n_threads=1, numpy_sort=True) as server:
        yield server


def _flow_command(server: LlamaCppServer) -> tuple[list[str], dict[str, str]]:
    # llama-cpp-python answers one request at a time, ~50 ms per echoed token on a shared
    # CPU: generous waits (docs/scale_out.md), so a slow machine fails no request.
    env = {**os.environ, "TRUSTMARGIN_REMOTE_TIMEOUT": "900",
           "TRUSTMARGIN_REMOTE_READ_TIMEOUT": "900"}
    fresh = os.environ.get(PYTHON_ENV)
    if fresh:
        env.pop("PYTHONPATH", None)  # the venv's installed package, not this checkout
        return [fresh, str(FLOW), server.url, server.alias], env
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return [sys.executable, "-c", BLOCKER, str(FLOW), server.url, server.alias], env


def test_remote_scoring_runs_without_torch_or_transformers(llama_server: LlamaCppServer,
                                                           tmp_path: Path) -> None:
    command, env = _flow_command(llama_server)
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["heavy_loaded"] == []
    for part in ("ask", "score", "chain"):
        assert summary[part]["source"] in ("direct", "rag"), summary
        assert isinstance(summary[part]["m"], float), summary
    assert "pip install 'trustmargin-integrations[local]'" in summary["local_refused"]
