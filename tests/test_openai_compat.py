"""The OpenAI-compatible backend against a REAL llama.cpp server (llama-cpp-python) on 127.0.0.1.

The server runs the embedded SmolLM2-135M GGUF *quantized* (Q4_1 kernels); the local backend
runs the same file dequantized to fp32 in transformers. Their log-likelihoods therefore differ
by quantization noise. Measured with ``benchmarks/remote.py agreement`` on 12 real
ComplexWebQuestions questions (PRAG's BM25 passages, context cut to 128 tokens; 144
likelihoods): |delta l| mean 0.015, 95th percentile 0.054, max 0.105 nats per token;
|delta M| max 0.030; decisions 12/12 identical (docs/scale_out.md). The tests allow
``LIKELIHOOD_TOL = 0.25`` per length-normalized likelihood (2.4x the largest measured gap)
and ``MARGIN_TOL = 0.25`` on M (8x), and require the same decision.

The retry / backoff / concurrency / response-parsing tests and the request-order test use
``httpx.MockTransport``: a real server cannot be made to answer 429, 503, a timeout or a
malformed body on demand, and the order test needs many requests answered instantly. Those
tests fake the HTTP layer (they sit under their own heading); everything else talks to the
real server.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

# The test server lives beside the tests (tests/llama_cpp_server.py), not in the library.
from llama_cpp_server import LlamaCppServer, free_local_port

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend, ContinuationRequest
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, redact_url
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import BackendError, InvalidInputError
from trustmargin_integrations.model_store import REGISTRY

LIKELIHOOD_TOL = 0.25
"""Largest allowed |l_remote - l_local| per length-normalized likelihood (nats per token)."""
MARGIN_TOL = 0.25
"""Largest allowed |M_remote - M_local|."""

SECRET_KEY = "sk-test-8c1e5f0d-never-print"

# Short real questions with conflicting candidates; short passages keep the server fast
# (llama-cpp-python spends ~50 ms per echoed prompt token formatting log-probabilities).
QUESTIONS = [
    {"question": "Who directed the film Alien?",
     "passages": ["Alien is a 1979 science fiction horror film directed by Ridley Scott."],
     "direct_answer": "Steven Spielberg", "rag_answer": "Ridley Scott"},
    {"question": "What is the capital of Australia?",
     "passages": ["Sydney is the largest city of Australia, home of the Opera House."],
     "direct_answer": "Canberra", "rag_answer": "Sydney"},
]


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaCppServer]:
    with LlamaCppServer(REGISTRY["smollm2-135m"].locate(), alias="smollm2-135m", n_ctx=1024,
                        n_threads=1, numpy_sort=True) as server:
        yield server


@pytest.fixture(scope="module")
def remote(llama_server: LlamaCppServer, backend: Any) -> Iterator[OpenAICompatBackend]:
    # llama-cpp-python answers one request at a time at ~50 ms per echoed token on a shared
    # CPU, so four queued requests can pass the 60 s default read timeout: the waits
    # docs/scale_out.md gives for this server.
    with OpenAICompatBackend(llama_server.url, llama_server.alias, backend.tokenizer,
                             max_concurrency=4, model_id=backend.model_id,
                             read_timeout_s=600, timeout_s=1800) as rb:
        yield rb


# -- real server -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.server
def test_protocol_rendering_and_tokens_match_the_local_backend(
    remote: OpenAICompatBackend, backend: Any
) -> None:
    assert isinstance(remote, Backend)
    message = "Question:\nWho wrote Hamlet?\n\nAnswer:"
    assert remote.render_prompt(message) == backend.render_prompt(message)
    for text in ("Ridley Scott", "Goiás", "1,234 km²"):
        assert remote.count_tokens(text) == backend.count_tokens(text)
    assert remote.truncate_tokens("one two three four", 2) == backend.truncate_tokens(
        "one two three four", 2)
    assert remote.check_tokenizer()
    # An answer with no tokens is not sent to the server.
    sent = remote.requests_sent
    assert remote.score_continuations([ContinuationRequest("Q:", "")])[0].num_tokens == 0
    assert remote.requests_sent == sent


@pytest.mark.slow
@pytest.mark.server
def test_six_likelihoods_and_decisions_agree_with_the_local_backend(
    remote: OpenAICompatBackend, backend: Any
) -> None:
    config = TrustMarginConfig(max_context_tokens=64)
    local = TrustMargin(backend, config).arbitrate_batch(QUESTIONS)
    served = TrustMargin(remote, config).arbitrate_batch(QUESTIONS)
    for ref, got in zip(local, served, strict=True):
        assert got.m is not None and ref.m is not None
        assert got.model_id == ref.model_id
        for cand in ("direct", "rag"):
            a = getattr(ref, f"{cand}_likelihoods")
            b = getattr(got, f"{cand}_likelihoods")
            assert a.num_tokens == b.num_tokens
            for view in ("question_only", "question_context", "context_only"):
                gap = abs(getattr(a, view) - getattr(b, view))
                assert gap <= LIKELIHOOD_TOL, (ref.question, cand, view, gap)
        assert abs(ref.m - got.m) <= MARGIN_TOL, (ref.question, ref.m, got.m)
        assert got.source == ref.source, (ref.question, ref.m, got.m)


@pytest.mark.slow
@pytest.mark.server
def test_greedy_generation_matches_the_local_backend(remote: OpenAICompatBackend,
                                                     backend: Any) -> None:
    from trustmargin_integrations.answers import clean_answer

    prompts = [backend.render_prompt(f"Question:\n{q}\n\nAnswer:")
               for q in ("What is the capital of France?", "Who wrote Hamlet?")]
    remote_texts, local_texts = remote.generate(prompts, 8), backend.generate(prompts, 8)
    assert all(clean_answer(t) for t in remote_texts)
    # The server decodes the quantized file, the local backend its fp32 dequantization, so a
    # near-tie may break the other way (seen: "Hamlet by William Shakespeare" from a portable
    # llama.cpp build, "Hamlet is the work of ..." locally). What must hold: the server's
    # greedy text is as likely under the local model as the local greedy text, within the
    # likelihood tolerance above; a wrong prompt or a broken decoder falls far below it.
    for prompt, got, ref in zip(prompts, remote_texts, local_texts, strict=True):
        if clean_answer(got) == clean_answer(ref):
            continue
        served, local = backend.score_continuations([ContinuationRequest(prompt, got),
                                                     ContinuationRequest(prompt, ref)])
        assert served.mean >= local.mean - LIKELIHOOD_TOL, (got, ref, served.mean, local.mean)
    # The unambiguous question must come out the same.
    assert clean_answer(remote_texts[0]) == clean_answer(local_texts[0])


@pytest.mark.slow
@pytest.mark.server
def test_too_long_prompt_fails_fast_with_the_servers_reason(remote: OpenAICompatBackend) -> None:
    sent = remote.requests_sent
    with pytest.raises(BackendError, match=r"HTTP 400.*context"):
        remote.generate(["word " * 2000], 4)
    assert remote.requests_sent - sent == 1  # a 400 is not retried


@pytest.mark.slow
@pytest.mark.server
def test_server_without_prompt_logprobs_is_a_clear_error(backend: Any) -> None:
    # A real llama.cpp server started without logits_all cannot echo prompt log-probabilities.
    with LlamaCppServer(REGISTRY["smollm2-135m"].locate(), alias="nolog", n_ctx=256,
                        n_threads=1, logits_all=False, numpy_sort=True) as server, \
            OpenAICompatBackend(server.url, "nolog", backend.tokenizer) as rb:
        with pytest.raises(BackendError, match="cannot return prompt log-probabilities"):
            rb.score_continuations([ContinuationRequest("Hello", " world")])
        assert rb.requests_sent == 1  # not retried: it can never succeed


def test_unreachable_server_fails_after_bounded_retries(backend: Any) -> None:

    rb = OpenAICompatBackend(f"http://127.0.0.1:{free_local_port()}", "m", backend.tokenizer,
                             max_retries=2, backoff_s=0.01, api_key=SECRET_KEY)
    with pytest.raises(BackendError, match=r"3 attempt.*connection failed") as err:
        rb.generate(["hi"], 2)
    assert SECRET_KEY not in str(err.value)


# -- HTTP behaviour (faked transport: 429/503/timeouts cannot be provoked on a real server) ---


def echo_body(tokens: list[str], logprobs: list[float | None], generated: int = 1,
              text: str | None = None, prompt_tokens: int | None = None) -> dict[str, Any]:
    """An echo response; ``text`` (default: the tokens joined) is what the server echoes."""
    return {"choices": [{"text": "".join(tokens) if text is None else text, "index": 0,
                         "logprobs": {"tokens": tokens, "token_logprobs": logprobs}}],
            "usage": {"prompt_tokens": len(tokens) - generated if prompt_tokens is None
                      else prompt_tokens, "completion_tokens": generated}}


def fake_backend(backend: Any, handler: Callable[[httpx.Request], httpx.Response],
                 **kwargs: Any) -> OpenAICompatBackend:
    return OpenAICompatBackend("http://127.0.0.1:1/v1", "m", backend.tokenizer,
                               transport=httpx.MockTransport(handler), backoff_s=0.01, **kwargs)


def test_retries_429_and_5xx_then_succeeds(backend: Any) -> None:
    answers = iter([httpx.Response(429, headers={"Retry-After": "0"}),
                    httpx.Response(503, text="overloaded"),
                    httpx.Response(200, json={"choices": [{"text": "Paris"}]})])
    rb = fake_backend(backend, lambda request: next(answers))
    assert rb.generate(["q"], 4) == ["Paris"]
    assert (rb.requests_sent, rb.retries) == (3, 2)


def test_gives_up_after_max_retries_on_5xx_and_timeouts(backend: Any) -> None:
    rb = fake_backend(backend, lambda request: httpx.Response(502), max_retries=2)
    with pytest.raises(BackendError, match=r"3 attempt\(s\): HTTP 502"):
        rb.generate(["q"], 4)

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    rb = fake_backend(backend, timeout, max_retries=1)
    with pytest.raises(BackendError, match="timed out"):
        rb.generate(["q"], 4)
    assert rb.requests_sent == 2


def test_client_errors_and_odd_bodies_are_not_retried(backend: Any) -> None:
    rb = fake_backend(backend, lambda request: httpx.Response(404, text="no such model"))
    with pytest.raises(BackendError, match="HTTP 404: no such model"):
        rb.generate(["q"], 4)
    assert rb.requests_sent == 1
    rb = fake_backend(backend, lambda request: httpx.Response(200, text="<html>"))
    with pytest.raises(BackendError, match="not JSON"):
        rb.generate(["q"], 4)
    rb = fake_backend(backend, lambda request: httpx.Response(200, json={"choices": []}))
    with pytest.raises(BackendError, match="without choices"):
        rb.generate(["q"], 4)


def test_echo_without_logprobs_is_a_clear_error(backend: Any) -> None:
    rb = fake_backend(backend, lambda request: httpx.Response(
        200, json={"choices": [{"text": "x", "logprobs": None}]}))
    with pytest.raises(BackendError, match="no prompt log-probabilities"):
        rb.score_continuations([ContinuationRequest("Q:", "Paris")])


def test_answer_is_aligned_from_the_end_of_the_echo(backend: Any) -> None:
    rb = fake_backend(backend, lambda request: httpx.Response(500))
    request = ContinuationRequest("Who?", "Ridley Scott")
    n = rb.count_tokens("Ridley Scott")
    answer_tokens = [backend.tokenizer.decode([t]) for t in
                     backend.tokenizer("Ridley Scott", add_special_tokens=False).input_ids]
    answer_lp = [-1.0 / 2**i for i in range(n)]
    sent = rb.count_tokens("Who?Ridley Scott")
    # vLLM style: BOS echoed with a null log-probability (and counted), one generated token
    # at the end; the echoed text is the prompt as sent and the generation.
    vllm = echo_body(["<s>", "Who", "?", *answer_tokens, "."],
                     [None, -3.0, -2.0, *answer_lp, -9.0], text="Who?Ridley Scott.",
                     prompt_tokens=sent + 1)
    # llama-cpp-python style: no BOS; a different number of leading prompt tokens.
    llama = echo_body(["?", *answer_tokens, "!"], [None, *answer_lp, -7.0],
                      text="Who?Ridley Scott!", prompt_tokens=sent)
    for body in (vllm, llama):
        assert rb.answer_logprob(body, request) == pytest.approx(sum(answer_lp))
    # The generated token count comes from usage; an EOS-only completion generates none.
    no_gen = echo_body(["Who", *answer_tokens], [None, *answer_lp], generated=0,
                       text="Who?Ridley Scott", prompt_tokens=sent)
    assert rb.answer_logprob(no_gen, request) == pytest.approx(sum(answer_lp))
    other = [backend.tokenizer.decode([t]) for t in
             backend.tokenizer("Tony Scott", add_special_tokens=False).input_ids]
    with pytest.raises(BackendError, match="does not match the served model"):
        rb.answer_logprob(echo_body(["Who", "?", *other, "."],
                                    [None, -2.0, *([-0.5] * len(other)), -9.0],
                                    text="Who?Ridley Scott.", prompt_tokens=sent), request)
    with pytest.raises(BackendError, match="null log-probabilities"):
        rb.answer_logprob(echo_body(["?", *answer_tokens, "."], [None, *([None] * n), -1.0],
                                    text="Who?Ridley Scott.", prompt_tokens=sent), request)
    with pytest.raises(BackendError, match="too few"):
        rb.answer_logprob(echo_body([*answer_tokens, "."], [None, *answer_lp[1:], -1.0]),
                          request)


def test_in_flight_requests_are_bounded(backend: Any) -> None:
    lock = threading.Lock()
    active = peak = 0

    def slow(request: httpx.Request) -> httpx.Response:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.05)
        with lock:
            active -= 1
        return httpx.Response(200, json={"choices": [{"text": "ok"}]})

    rb = fake_backend(backend, slow, max_concurrency=3)
    assert rb.generate([f"q{i}" for i in range(12)], 2) == ["ok"] * 12
    assert peak == 3


def test_api_key_is_sent_but_never_shown(backend: Any, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization", ""))
        return httpx.Response(503)

    caplog.set_level(logging.DEBUG)
    rb = fake_backend(backend, handler, api_key=SECRET_KEY, max_retries=1)
    with pytest.raises(BackendError) as err:
        rb.generate(["q"], 2)
    assert seen == [f"Bearer {SECRET_KEY}"] * 2
    for text in (str(err.value), repr(rb), rb.url, rb.model_id, caplog.text):
        assert SECRET_KEY not in text


def test_bad_settings_are_typed_errors(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = backend.tokenizer
    for kwargs, field in (({"base_url": "", "model": "m"}, "base_url"),
                          ({"base_url": "127.0.0.1:8000", "model": "m"}, "base_url"),
                          ({"base_url": "http://h:1", "model": " "}, "model"),
                          ({"base_url": "http://h:1", "model": "m", "max_concurrency": 0},
                           "max_concurrency")):
        with pytest.raises(InvalidInputError) as err:
            OpenAICompatBackend(tokenizer=tok, **kwargs)
        assert err.value.field == field
    with pytest.raises(InvalidInputError):
        OpenAICompatBackend("http://h:1", "m", 42)
    monkeypatch.delenv("TRUSTMARGIN_REMOTE_URL", raising=False)
    with pytest.raises(InvalidInputError, match="TRUSTMARGIN_REMOTE_URL"):
        OpenAICompatBackend.from_env(tok)
    assert redact_url("http://user:pw@host:8000/v1?key=1") == "http://host:8000/v1"
    assert OpenAICompatBackend("http://u:pw@h:1/v1/", "m", tok).url == "http://h:1"


def test_arbiter_generates_missing_candidates_then_scores_cleaned_answers(backend: Any) -> None:
    tok = backend.tokenizer
    log: list[str] = []
    lock = threading.Lock()

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with lock:
            log.append("score" if body.get("echo") else "generate")
        if not body.get("echo"):
            # Raw generations that need cleaning: a label and a second line.
            return httpx.Response(200, json={"choices": [{"text": "Answer: Ridley Scott.\nMore"}]})
        ids = tok(body["prompt"], add_special_tokens=False).input_ids
        tokens = [tok.decode([i]) for i in ids] + ["."]
        return httpx.Response(200, json=echo_body(tokens, [None] + [-0.5] * len(ids)))

    rb = fake_backend(backend, server, max_concurrency=4)
    tm = TrustMargin(rb, TrustMarginConfig(skip_scoring_when_agree=False))
    decisions = tm.arbitrate_batch([{"question": q["question"], "passages": q["passages"]}
                                    for q in QUESTIONS])
    # Direct answers for both questions, then RAG answers, each side one concurrent wave;
    # scoring starts only once every candidate is known. Direct and RAG give the same text,
    # which is one scored item (arbiter/plan.py): three views for each of two questions.
    assert log[:4] == ["generate"] * 4 and log[4:] == ["score"] * 6
    for d in decisions:
        assert (d.direct_answer, d.rag_answer) == ("Ridley Scott", "Ridley Scott")
        assert d.direct_generated and d.rag_generated
        assert d.direct_likelihoods is not None and d.direct_likelihoods.question_only == -0.5
        assert d.m == pytest.approx(0.0)


# -- the test server's launcher (tests/llama_cpp_launch.py) --------------------------------


def test_the_launchers_sort_is_the_builtin_sort_of_a_vocabulary_row() -> None:
    # The launcher swaps llama-cpp-python's per-token sorted(zip(logprobs, range(V)),
    # reverse=True) for a numpy sort; the server's answers are only the same if the lists are.
    import numpy as np
    from llama_cpp_launch import sorted_like_builtin

    def both(values: Any, indices: range) -> tuple[list[Any], list[Any]]:
        """The launcher's and the builtin's sort of ``zip(values, indices)``, descending."""
        # strict=False: llama-cpp-python's own zip (a strict zip reduces the same way).
        return (sorted_like_builtin(zip(values, indices, strict=False), reverse=True),
                sorted(zip(values, indices, strict=False), reverse=True))

    row = np.random.default_rng(7).standard_normal(49152).astype(np.float32)
    row[::97] = row[5]  # ties: the later index comes first
    row[1::89] = -np.inf  # masked tokens
    for values in (row, row[:3], row[:1], -np.abs(row[:1000]).astype(np.float64)):
        fast, builtin = both(values, range(len(values)))
        assert fast == builtin
    # Other shapes go to the builtin untouched: a started iterator, another range, NaN, a key.
    started = iter(row[:50])
    next(started)
    assert sorted_like_builtin(zip(started, range(49), strict=False), reverse=True) == sorted(
        zip(row[1:50], range(49), strict=False), reverse=True)
    fast, builtin = both(row[:50], range(1, 51))
    assert fast == builtin
    with_nan = row[:50].copy()
    with_nan[3] = np.nan
    fast, builtin = both(with_nan, range(50))
    assert [i for _, i in fast] == [i for _, i in builtin]  # NaN is not equal to itself
    assert sorted_like_builtin([3, 1, 2]) == [1, 2, 3]
    assert sorted_like_builtin(["bb", "a"], key=len, reverse=True) == ["bb", "a"]
