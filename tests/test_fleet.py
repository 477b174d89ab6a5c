"""A fleet of REAL llama.cpp servers (llama-cpp-python on 127.0.0.1) answers as one server does.

Two servers serve the embedded SmolLM2-135M GGUF; a third serves the same file with another
RoPE base, which is another model as far as the numbers go (the mixed fleet). The servers run
with ``--n_batch 1``: llama-cpp-python reuses the KV cache of the previous prompt's common
prefix and evaluates the rest in one batch, and another batch split moves a likelihood by
about 1e-2 (measured 0.011), so with the default batch a server's numbers depend on which
request it served before, alone or in a fleet. Token by token they do not, and the fleet's
results can be compared with one server's to the digit. Members reach
their server through a small forwarding proxy on the fault server (tests/fault_server.py)
where a test must count requests in flight or make a member fail: the answers are still the
real server's, byte for byte, until the proxy is told to fail.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fault_server import Answer, FaultServer, Seen
from llama_cpp_server import LlamaCppServer

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.fleet import Fleet
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import (
    BackendError,
    InvalidInputError,
    MixedFleetError,
    ServerUnavailableError,
)
from trustmargin_integrations.evaluation.runner import example_key, settings_for
from trustmargin_integrations.model_store import REGISTRY

pytestmark = [pytest.mark.slow, pytest.mark.server]

MODEL = "smollm2-135m"
SECRET = "fleet-pass-never-shown"

# llama-cpp-python spends ~50-200 ms per echoed prompt token (it sorts the vocabulary for
# each), so the members render ChatML without SmolLM2's 30-token system prompt.
SHORT_CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
CAPITALS = [("France", "Paris"), ("Peru", "Lima")]
PROMPTS = [SHORT_CHAT.format(f"What is the capital of {country}?") for country, _ in CAPITALS]
REQUESTS = [ContinuationRequest(prompt, city) for prompt, (_, city)
            in zip(PROMPTS, CAPITALS, strict=True)] + [
    ContinuationRequest(prompt, "Berlin") for prompt in PROMPTS]
QUESTION = {"question": "Who directed the film Alien?",
            "passages": ["Alien is a 1979 science fiction horror film directed by Ridley Scott."],
            "direct_answer": "Steven Spielberg", "rag_answer": "Ridley Scott"}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(MODEL)


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LlamaCppServer, LlamaCppServer]]:
    gguf = REGISTRY[MODEL].locate()
    options = {"alias": MODEL, "n_ctx": 512, "n_threads": 1, "extra_args": ["--n_batch", "1"],
               "numpy_sort": True}
    with LlamaCppServer(gguf, **options) as first, LlamaCppServer(gguf, **options) as second:
        yield first, second


def member(url: str, tokenizer: Any, **options: Any) -> OpenAICompatBackend:
    # llama-cpp-python answers one request at a time, so a request may wait behind the
    # others in flight: generous read bounds; one quick retry so a dead member fails fast.
    settings = {"max_concurrency": 4, "model_id": MODEL, "read_timeout_s": 600,
                "timeout_s": 1800, "max_retries": 1, "backoff_s": 0.01,
                "renderer": SHORT_CHAT.format, **options}
    return OpenAICompatBackend(url, MODEL, tokenizer, **settings)


class Proxy:
    """Forwards each request to a real server and returns its answer unchanged, counting the
    requests in flight; after ``healthy`` requests it answers ``failure`` instead."""

    def __init__(self, target: str, healthy: int | None = None,
                 failure: Answer | None = None) -> None:
        self.target, self.healthy, self.failure = target, healthy, failure or Answer(503)
        self.lock = threading.Lock()
        self.forwarded = self.in_flight = self.peak = 0

    def __call__(self, seen: Seen) -> Answer:
        with self.lock:
            if self.healthy is not None and self.forwarded >= self.healthy:
                return self.failure
            self.forwarded += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            reply = httpx.post(self.target + seen.path, json=seen.body, timeout=600)
        finally:
            with self.lock:
                self.in_flight -= 1
        return Answer(reply.status_code, reply.content)


def with_password(url: str) -> str:
    return url.replace("http://", f"http://fleet:{SECRET}@")


def test_two_servers_with_four_in_flight_answer_exactly_as_one_server(
        servers: tuple[LlamaCppServer, LlamaCppServer], tokenizer: Any) -> None:
    # The arbiter generates both candidates (2 requests), then scores six likelihoods, each
    # of its own prompt and answer: a result in the wrong place would change the Decision.
    first, second = servers
    config = TrustMarginConfig(max_context_tokens=32, max_new_tokens=8)
    question = {key: QUESTION[key] for key in ("question", "passages")}
    alone = TrustMargin(member(first.url, tokenizer), config)
    ref, = alone.arbitrate_batch([question])
    assert ref.m is not None and ref.direct_generated and ref.rag_generated

    proxies = [Proxy(first.url), Proxy(second.url)]
    with FaultServer(proxies[0]) as front_a, FaultServer(proxies[1]) as front_b, \
            Fleet([member(front_a.url, tokenizer, max_concurrency=8),
                   member(front_b.url, tokenizer, max_concurrency=8)], in_flight=4) as fleet:
        spread = TrustMargin(fleet, config)
        got, = spread.arbitrate_batch([question])
        # Both servers did real work (the probe, then a share of the rest).
        assert all(count > 1 for count in fleet.answered().values()), fleet.answered()
        # Two callers at once (16 requests, each call's pool as large as the fleet's slots,
        # each member's connection pool twice in_flight): still never more than four
        # requests at a time on a server.
        with ThreadPoolExecutor(max_workers=2) as callers:
            both = list(callers.map(fleet.score_continuations, [REQUESTS * 2] * 2))
        assert both[0] == both[1] and both[0][:4] == both[0][4:]
        assert all(1 < proxy.peak <= 4 for proxy in proxies), [p.peak for p in proxies]
    assert got.model_dump(exclude={"timings"}) == ref.model_dump(exclude={"timings"})
    # The evaluation's cache key is a single server's: a run resumes on either.
    keys = [example_key(tm, settings_for(tm, top_k=3, dtype=None, retrieval="bm25")
                        .as_dict(), question["question"], question["passages"], None)
            for tm in (alone, spread)]
    assert keys[0] == keys[1]


def test_a_fleet_of_two_models_is_refused(servers: tuple[LlamaCppServer, LlamaCppServer],
                                          tokenizer: Any) -> None:
    first, second = servers
    # Told apart before any request: the members name different models.
    named = member(second.url, tokenizer, model_id="qwen2.5-1.5b")
    with pytest.raises(MixedFleetError) as told:
        Fleet([member(first.url, tokenizer), named], in_flight=2)
    assert told.value.field == "backends"
    assert first.url in str(told.value) and second.url in str(told.value)
    assert named.requests_sent == 0

    # Found on first use: the same file served with another RoPE base is another model.
    gguf = REGISTRY[MODEL].locate()
    with LlamaCppServer(gguf, alias=MODEL, n_ctx=512, n_threads=1,
                        extra_args=["--n_batch", "1", "--rope_freq_base", "2000"],
                        numpy_sort=True) as other:
        odd = member(other.url, tokenizer)
        fleet = Fleet([member(first.url, tokenizer), odd], in_flight=2)
        with pytest.raises(MixedFleetError) as found:
            fleet.score_continuations(REQUESTS)
        assert other.url in str(found.value) and first.url in str(found.value)
        assert odd.requests_sent == 1  # the probe, nothing of ours


def test_a_server_that_goes_down_hands_its_requests_to_the_others(
        servers: tuple[LlamaCppServer, LlamaCppServer], tokenizer: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    first, second = servers
    expected = member(first.url, tokenizer).score_continuations(REQUESTS)
    # The second member answers the probe and one request, then only 503 (after its one
    # retry: unavailable). Its URL carries a password, which no message may show.
    dying = Proxy(second.url, healthy=2)
    with FaultServer(dying) as front, caplog.at_level(logging.WARNING), \
            Fleet([member(first.url, tokenizer), member(with_password(front.url), tokenizer)],
                  in_flight=2) as fleet:
        assert fleet.score_continuations(REQUESTS) == expected
        assert list(fleet.retired) == [front.url]
        # Two probes, the requests, and the re-probe of the member left (every member that
        # answered part of a call scores the probe again before the call returns).
        assert sum(fleet.answered().values()) == 2 + len(REQUESTS) + 1
        # Retired for good: the next call does not knock on its door again.
        knocks = len(front.seen)
        assert fleet.score_continuations(REQUESTS[:2]) == expected[:2]
        assert len(front.seen) == knocks
    assert front.url in caplog.text
    assert SECRET not in caplog.text and all(SECRET not in why for why in fleet.retired.values())

    # Every member down: a typed error naming each server (redacted), so the run stops and
    # resumes later from its result store.
    with FaultServer(Proxy(first.url, healthy=1)) as front_a, \
            FaultServer(Proxy(second.url, healthy=1)) as front_b:
        fleet = Fleet([member(with_password(front_a.url), tokenizer),
                       member(front_b.url, tokenizer)], in_flight=2)
        with pytest.raises(ServerUnavailableError) as down:
            fleet.score_continuations(REQUESTS[:2])
    message = str(down.value)
    assert front_a.url in message and front_b.url in message and SECRET not in message


def test_a_refused_request_stops_the_call_without_retiring_anyone(
        servers: tuple[LlamaCppServer, LlamaCppServer], tokenizer: Any) -> None:
    first, second = servers
    # A 400 is the request's fault, not the server's: another member would refuse it too,
    # so it is not sent elsewhere (the two requests go one to each member).
    refusing = Proxy(first.url, healthy=1, failure=Answer(400, {"error": "prompt too long"}))
    with FaultServer(refusing) as front:
        fleet = Fleet([member(front.url, tokenizer), member(second.url, tokenizer)],
                      in_flight=2)
        with pytest.raises(BackendError, match="HTTP 400") as refused:
            fleet.score_continuations(REQUESTS[:2])
    assert not isinstance(refused.value, ServerUnavailableError)
    assert fleet.retired == {}


def test_a_fleet_that_cannot_work_is_a_typed_error_before_any_request(tokenizer: Any) -> None:
    # Nothing listens on these ports: building members and the fleet sends no request.
    one, two = member("http://127.0.0.1:9", tokenizer), member("http://127.0.0.1:11", tokenizer)
    for backends, in_flight, field in (([], 2, "backends"), ("http://127.0.0.1:9", 2,
                                                             "backends"),
                                       ([one, "http://127.0.0.1:11"], 2, "backends[1]"),
                                       ([one, member("http://127.0.0.1:9", tokenizer)], 2,
                                        "backends[1]"),
                                       ([one, two], 0, "in_flight"),
                                       ([one, two], True, "in_flight")):
        with pytest.raises(InvalidInputError) as bad:
            Fleet(backends, in_flight=in_flight)
        assert bad.value.field == field, (backends, in_flight)
    assert one.requests_sent == two.requests_sent == 0
