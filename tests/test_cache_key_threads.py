"""The CPU thread count is part of the cache key of every local result (``eval``, ``score``):
torch's intra-op threads change the order of float reductions, so likelihoods move by about
1e-5 from one count to another, and a result computed with one count was reused by a run
with another (its "exact" resumed output then differed from an uninterrupted run's).

Real parts: the embedded model, the evaluation runner's keys and ``trustmargin score`` run
in-process twice on one output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from cli_support import run_main

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.evaluation.runner import example_key, settings_for


@pytest.fixture
def threads() -> Iterator[None]:
    """Restore the session's thread count after the test changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_eval_keys_name_the_thread_count(tm: TrustMargin, threads: None) -> None:
    keys = []
    for count in (1, 2, 1):
        torch.set_num_threads(count)
        settings = settings_for(tm, top_k=3, dtype=None, retrieval="precomputed").as_dict()
        assert settings["threads"] == count
        keys.append(example_key(tm, settings, "Who?", ["Passage 1: p"], None))
    assert keys[0] != keys[1] and keys[0] == keys[2]


@pytest.mark.slow
def test_score_recomputes_under_another_thread_count(
        tm: TrustMargin, threads: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({
        "question": "Who designed the Zelvora Bridge?", "direct_answer": "Gustave Eiffel",
        "rag_answer": "Marta Okonkwo",
        "passages": ["The Zelvora Bridge was designed by Marta Okonkwo."]}) + "\n",
        encoding="utf-8")
    args = ["score", "-i", str(src), "-o", str(tmp_path / "out.jsonl"), "--device", "cpu"]
    outputs = []
    for count in (1, 2, 1):
        torch.set_num_threads(count)
        done = run_main(*args)
        assert done.exit_code == 0, done.output
        outputs.append(done.output)
    assert "(1 computed, 0 reused)" in outputs[0]
    assert "(1 computed, 0 reused)" in outputs[1]  # another count: not the same numbers
    assert "(0 computed, 1 reused)" in outputs[2]
