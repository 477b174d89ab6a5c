"""``eval``, ``check``, ``calibrate`` and ``report`` on an OpenAI-compatible server: the real
llama.cpp test server (tests/llama_cpp_server.py) serving the embedded SmolLM2-135M GGUF,
against the same commands on the local backend.

The server runs the GGUF's Q4_1 kernels, the local backend the same file in fp32, so their
numbers differ by quantization noise, and greedy generation can flip on a near-tie
(docs/scale_out.md, "Agreement with the local backend"). Every server decision must be the
local backend's with M within ``MARGIN_TOL`` (the tolerance tests/test_openai_compat.py holds
the server to): the local run's where both generated the same candidates, else the local
backend's on the server's candidates. Kept small (one benchmark question, four
demo questions, one passage each): the server spends about 30 ms of CPU per echoed token
with its log-probability sort done by numpy (``numpy_sort``, tests/llama_cpp_launch.py), and
65-105 ms as installed. Measured alone under a load average of about 7: 118 s of CPU for
this file, server included (488 s with the installed server on two threads).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import DEMO, run_main, write_labeled
from llama_cpp_server import LlamaCppServer

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.evaluation.datasets import EvalExample, load_dataset, load_examples
from trustmargin_integrations.evaluation.rundir import load_run
from trustmargin_integrations.evaluation.runner import (
    PassageSource,
    PrecomputedPassages,
    RetrieverPassages,
    short_answer_arbiter,
)
from trustmargin_integrations.model_store import REGISTRY
from trustmargin_integrations.policy_file import PolicyFile
from trustmargin_integrations.retrieval.bm25 import BM25Index

pytestmark = [pytest.mark.slow, pytest.mark.server]

MARGIN_TOL = 0.25
"""Largest allowed |M_remote - M_local| (as in tests/test_openai_compat.py)."""

# The benchmark data lies beside the repository (../shared/data/raw) unless told otherwise.
DATA_DIR = Path(os.environ.get("TRUSTMARGIN_DATA")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "raw")


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaCppServer]:
    with LlamaCppServer(REGISTRY["smollm2-135m"].locate(), alias="smollm2-135m", n_ctx=1024,
                        n_threads=1, numpy_sort=True) as server:
        yield server


@pytest.fixture
def served(llama_server: LlamaCppServer, tm: TrustMargin,
           monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The options that put a command on the server; local runs reuse the session's model."""
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    # One request at a time, with the waits docs/scale_out.md gives for this server.
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_READ_TIMEOUT", "600")
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_TIMEOUT", "1800")
    return ["--backend", f"openai:{llama_server.url}/v1#{llama_server.alias}",
            "--concurrency", "1"]


def assert_same_decisions(tm: TrustMargin, local_dir: Path, remote_dir: Path,
                          source: PassageSource, examples: list[EvalExample]) -> int:
    """Every server decision is the local backend's within the tolerance: where both engines
    generated the same candidates, against the local run's decision; where a greedy near-tie
    flipped under quantization, against the local backend deciding between the server's
    candidates (arbitrated as eval arbitrates, :func:`short_answer_arbiter`). Returns how
    many questions had the same candidates. ``source`` and ``examples`` give the passages
    the runs read (a run directory keeps their ids, not their texts)."""
    passages = {ex.id: found for ex, (found, _) in zip(examples, source.fetch(examples, 1),
                                                       strict=True)}
    local = {r.example.id: r.decision for run in load_run(local_dir) for r in run.records}
    remote = {r.example.id: r for run in load_run(remote_dir) for r in run.records}
    assert local.keys() == remote.keys()
    local_model = short_answer_arbiter(TrustMargin(tm.backend, TrustMarginConfig(top_k=1)))
    same = 0
    for key, record in remote.items():
        theirs = record.decision
        mine = local[key]
        if (mine.direct_answer, mine.rag_answer) == (theirs.direct_answer, theirs.rag_answer):
            same += 1
        else:
            mine = local_model.arbitrate_batch([{
                "question": record.example.question, "passages": passages[key],
                "direct_answer": theirs.direct_answer, "rag_answer": theirs.rag_answer}])[0]
        assert theirs.source == mine.source, key
        if mine.m is not None or theirs.m is not None:
            assert theirs.m == pytest.approx(mine.m, abs=MARGIN_TOL), key
    return same


def test_eval_calibrate_report_on_a_server(served: list[str], tm: TrustMargin,
                                           tmp_path: Path) -> None:
    common = ["eval", "--dataset", "cwq", "--data-dir", str(DATA_DIR), "--limit", "1",
              "--top-k", "1", "--no-report"]
    local_dir, remote_dir = tmp_path / "local", tmp_path / "remote"
    local = run_main(*common, "--run-dir", str(local_dir))
    assert local.exit_code == 0, local.output
    # The server's run starts from the local run's cache: none of it may be reused.
    shutil.copytree(local_dir, remote_dir)
    remote = run_main(*common, *served, "--run-dir", str(remote_dir))
    assert remote.exit_code == 0, remote.output
    assert "1 computed, 0 from cache" in remote.output and "on openai" in remote.output
    again = run_main(*common, *served, "--run-dir", str(remote_dir))
    assert again.exit_code == 0 and "0 computed, 1 from cache" in again.output, again.output
    assert load_run(remote_dir)[0].info["backend"] == "openai"
    assert load_run(local_dir)[0].info["backend"] == "hf"
    assert_same_decisions(tm, local_dir, remote_dir, PrecomputedPassages(),
                          load_dataset("cwq", DATA_DIR)[:1])

    fitted = run_main("calibrate", str(remote_dir), "--folds", "0", "--resamples", "200")
    assert fitted.exit_code == 0, fitted.output
    calibration = PolicyFile.load(remote_dir / "calibration.json")
    assert (calibration.backend_kind, calibration.backend_model) == ("openai", "smollm2-135m")
    report = run_main("report", str(remote_dir))
    assert report.exit_code == 0 and (remote_dir / "report.md").is_file(), report.output


def test_check_on_a_server_records_its_backend(
        served: list[str], tm: TrustMargin, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    labeled = write_labeled(tmp_path / "mine.jsonl", ("q02", "q04", "q11", "q14"))
    args = ["check", str(labeled), "--corpus", str(DEMO / "corpus.json"), "--top-k", "1",
            "--folds", "2", "--resamples", "300"]
    local = run_main(*args, "--run-dir", str(tmp_path / "local"))
    assert local.exit_code == 0, local.output
    remote = run_main(*args, *served, "--run-dir", str(tmp_path / "remote"))
    assert remote.exit_code == 0, remote.output
    assert "4 computed, 0 from cache" in remote.output
    if "Use RAG" in remote.output or "Use Direct" in remote.output:
        # A single source: the next step says what dropping the scoring saves.
        assert "saves the closed-book run and the scoring" in remote.output, remote.output
    else:
        assert "from_pretrained('openai:URL#smollm2-135m'" in remote.output  # how to load it
    again = run_main(*args, *served, "--run-dir", str(tmp_path / "remote"))
    assert again.exit_code == 0 and "0 computed, 4 from cache" in again.output, again.output
    bm25 = RetrieverPassages(BM25Index.from_corpus(DEMO / "corpus.json"), name="bm25")
    assert_same_decisions(tm, tmp_path / "local", tmp_path / "remote", bm25,
                          load_examples(labeled))

    policy = tmp_path / "remote" / "policy.json"
    fitted = PolicyFile.load(policy)
    assert (fitted.backend_kind, fitted.backend_model) == ("openai", "smollm2-135m")
    assert PolicyFile.load(tmp_path / "local" / "policy.json").backend_kind == "hf"
    with caplog.at_level(logging.WARNING, logger="trustmargin_integrations.policy_file"):
        TrustMargin.calibrated(tm.backend, policy)  # fitted on the server, loaded locally
    assert any("openai:smollm2-135m" in r.getMessage() and
               f"hf:{tm.backend.model_id}" in r.getMessage() for r in caplog.records)
