"""Requests sized to the deadline (issue 35, item 8): a server that answers one request at a
time gets only the work it can finish within each request's deadline, and a timeout names
the setting that raises it.

The server is ``tests/fault_server.py`` on 127.0.0.1, made to serve one request at a time
(a lock around a fixed pause), as a stock llama-cpp-python server does: a real one takes
minutes per request on this machine's two shared cores, and its pace cannot be set. The
client is real: httpx, the transport's deadlines and pacing, the real SmolLM2 tokenizer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fault_server import Answer, FaultServer, Seen, echo_answer, elapsed

from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.errors import ServerUnavailableError

REQUESTS = [ContinuationRequest(f"Question: What is {n} plus {n}?\nAnswer:", f" {2 * n}")
            for n in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The real SmolLM2 tokenizer (the server's echo is tokenized with it too)."""
    return load_tokenizer("smollm2-135m")


@pytest.fixture(autouse=True)
def no_remote_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEY", "TIMEOUT", "CONNECT_TIMEOUT", "READ_TIMEOUT", "RETRIES"):
        monkeypatch.delenv(f"TRUSTMARGIN_REMOTE_{name}", raising=False)


class OneAtATime:
    """Answers an echo after ``pause_s``, one request at a time (llama-cpp-python's lock);
    records the seconds each request spent from arrival to answer."""

    def __init__(self, tokenizer: Any, pause_s: float) -> None:
        self.tokenizer, self.pause_s = tokenizer, pause_s
        self.lock = threading.Lock()
        self.waits: list[float] = []

    def __call__(self, seen: Seen) -> Answer:
        arrived = time.monotonic()
        with self.lock:
            time.sleep(self.pause_s)
            self.waits.append(time.monotonic() - arrived)
        return echo_answer(self.tokenizer, seen.body["prompt"])


@pytest.fixture
def serial(tokenizer: Any) -> Iterator[tuple[FaultServer, OneAtATime]]:
    respond = OneAtATime(tokenizer, pause_s=0.3)
    with FaultServer(respond) as server:
        yield server, respond


def test_a_batch_on_a_one_at_a_time_server_fits_each_deadline(
        serial: tuple[FaultServer, OneAtATime], tokenizer: Any) -> None:
    # Eight requests of 0.3 s each at a 1 s deadline: sent together, the fourth onwards
    # waited past its deadline on the server (main: ServerUnavailableError, "did not complete
    # within the 1 s total"). Paced, each waits on the client, outside its deadline.
    server, respond = serial
    backend = OpenAICompatBackend(server.url, "m", tokenizer, timeout_s=1.0, max_retries=0,
                                  max_concurrency=8)
    scores = backend.score_continuations(REQUESTS)
    assert [s.num_tokens for s in scores] == [backend.count_tokens(r.continuation)
                                              for r in REQUESTS]
    assert backend.requests_sent == len(REQUESTS)  # no retry was needed
    assert max(respond.waits) < 1.0, respond.waits  # no request waited out its deadline


def test_a_parallel_server_still_gets_every_slot(tokenizer: Any) -> None:
    # The pacing measures the server: one answering fast at any depth is given
    # max_concurrency requests at once after its first answer.
    lock = threading.Lock()
    active = peak = 0

    def parallel(seen: Seen) -> Answer:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.1)
        with lock:
            active -= 1
        return echo_answer(tokenizer, seen.body["prompt"])

    with FaultServer(parallel) as server:
        backend = OpenAICompatBackend(server.url, "m", tokenizer, max_concurrency=4)
        backend.score_continuations(REQUESTS[:1])  # the first answer measures the pace
        backend.score_continuations(REQUESTS)
    assert peak == 4


def test_a_timeout_names_the_setting_and_what_the_request_needs(tokenizer: Any) -> None:
    # The pace is known (fast answers), then the server stalls past the total: the error
    # names TRUSTMARGIN_REMOTE_TIMEOUT with its field and value, and the request's size.
    calls = 0

    def stalls(seen: Seen) -> Answer:
        nonlocal calls
        calls += 1
        return Answer(hang=True) if calls > 1 else echo_answer(tokenizer, seen.body["prompt"])

    with FaultServer(stalls) as server:
        backend = OpenAICompatBackend(server.url, "m", tokenizer, timeout_s=1.0,
                                      max_retries=0)
        backend.score_continuations(REQUESTS[:1])
        with pytest.raises(ServerUnavailableError) as err:
            backend.score_continuations(REQUESTS[1:2])
    message = str(err.value)
    assert "Fix: raise TRUSTMARGIN_REMOTE_TIMEOUT (timeout_s, now 1 s)" in message, message
    units = backend.count_tokens(REQUESTS[1].prompt + REQUESTS[1].continuation) + 1
    assert f"this request carries {units} tokens" in message, message


def test_a_dead_server_costs_one_deadline_not_one_per_queued_request(tokenizer: Any) -> None:
    # Pacing queues requests on the client: when the one sent fails for good, the queued
    # ones are not sent one after another (8 x 1 s), they fail with it.
    with FaultServer(lambda seen: Answer(hang=True)) as server:
        backend = OpenAICompatBackend(server.url, "m", tokenizer, timeout_s=1.0,
                                      max_retries=0, max_concurrency=8)
        took, error = elapsed(lambda: backend.score_continuations(REQUESTS))
    assert isinstance(error, ServerUnavailableError), error
    assert took < 3.0, took
    assert len(server.seen) == 1
