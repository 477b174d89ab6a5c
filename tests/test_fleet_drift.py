"""A fleet stays honest (issue 35, item 2): a member that answers the probe honestly and then
drifts is retired with a warning, and its results are computed again on the others.

The members are ``tests/fault_server.py`` servers on 127.0.0.1 echoing log-probabilities
through the real SmolLM2 tokenizer: a real llama.cpp server cannot be made to drift on
demand. The fleet, its members' HTTP clients and the checks are the real ones.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fault_server import Drifting, FaultServer

from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.fleet import Fleet
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer

REQUESTS = [ContinuationRequest(f"Question: Who built bridge {n}?\nAnswer:", f" Builder {n}")
            for n in range(12)]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer("smollm2-135m")


def member(url: str, tokenizer: Any) -> OpenAICompatBackend:
    return OpenAICompatBackend(url, "m", tokenizer, max_concurrency=4, backoff_s=0.01)


def test_a_member_that_drifts_after_its_probe_is_retired_and_its_results_recomputed(
        tokenizer: Any, caplog: pytest.LogCaptureFixture) -> None:
    # main: the drifting member's answers came back moved by 0.2 and nobody was retired.
    honest, drifting = Drifting(tokenizer, honest=10**6), Drifting(tokenizer, honest=2)
    with FaultServer(honest) as good, FaultServer(drifting) as bad, \
            Fleet([member(good.url, tokenizer), member(bad.url, tokenizer)],
                  in_flight=2) as fleet:
        caplog.set_level(logging.WARNING, logger="trustmargin_integrations.backends.fleet")
        scores = fleet.score_continuations(REQUESTS)
        assert drifting.answered > 2  # it did answer (drifted) requests of the call
        assert all(s.mean == pytest.approx(-0.5) for s in scores), [s.mean for s in scores]
        assert list(fleet.retired) == [fleet.names[1]]
        assert "drifted" in fleet.retired[fleet.names[1]]
        assert any("retiring" in r.message and "drifted" in r.message for r in caplog.records)
        # Later calls run on the honest member alone.
        again = fleet.score_continuations(REQUESTS[:3])
        assert all(s.mean == pytest.approx(-0.5) for s in again)


def test_honest_members_are_all_kept(tokenizer: Any) -> None:
    with FaultServer(Drifting(tokenizer, honest=10**6)) as a, \
            FaultServer(Drifting(tokenizer, honest=10**6)) as b, \
            Fleet([member(a.url, tokenizer), member(b.url, tokenizer)], in_flight=2) as fleet:
        for _ in range(3):
            assert all(s.mean == pytest.approx(-0.5)
                       for s in fleet.score_continuations(REQUESTS))
        assert fleet.retired == {}
        assert all(count > 3 for count in fleet.answered().values())
