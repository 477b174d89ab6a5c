"""The OpenAI-compatible backend and ``trustmargin score --remote-url`` against a server that
misbehaves on purpose.

The server is ``tests/fault_server.py``: a real HTTP server on 127.0.0.1 (stdlib, one thread per
request, stopped after every test) that answers NaN, infinite, positive, boolean and string
log-probabilities, malformed bodies, never answers, trickles bytes, answers 429/500 with every
kind of ``Retry-After``, and echoes the ``Authorization`` header back. It is a stand-in: a real
vLLM or llama.cpp server cannot be made to do these on demand
(``tests/test_openai_compat.py`` covers a real llama.cpp server). Everything on the client side
is real: httpx and its sockets and timeouts, tenacity's retries, the real SmolLM2 tokenizer,
the real ``trustmargin`` command in a child process and its score cache.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

# The test server lives beside the tests (tests/fault_server.py), not in the library.
from fault_server import (
    Answer,
    FaultServer,
    Seen,
    echo_answer,
    echo_tokens,
    elapsed,
    scripted,
)

from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.errors import BackendError, InvalidInputError
from trustmargin_integrations.waits import MAX_RETRY_AFTER_S, Waits, retry_after_seconds

ROOT = Path(__file__).resolve().parents[1]
REQUEST = ContinuationRequest("Question: Who designed the tower?\nAnswer:", " Gustave Eiffel")
OK_TEXT = Answer(body={"choices": [{"text": "Paris"}]})


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The real SmolLM2 tokenizer (the server's echo is tokenized with it too)."""
    return load_tokenizer("smollm2-135m")


@pytest.fixture(autouse=True)
def no_remote_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEY", "TIMEOUT", "CONNECT_TIMEOUT", "READ_TIMEOUT", "RETRIES"):
        monkeypatch.delenv(f"TRUSTMARGIN_REMOTE_{name}", raising=False)


@pytest.fixture
def serve() -> Iterator[Any]:
    """Start fault servers for a test; every one is stopped after it, pass or fail."""
    started: list[FaultServer] = []

    def start(respond: Any) -> FaultServer:
        server = FaultServer(respond).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def client(server: FaultServer, tokenizer: Any, url: str | None = None,
           **kwargs: Any) -> OpenAICompatBackend:
    kwargs.setdefault("backoff_s", 0.01)
    return OpenAICompatBackend(url or server.url, "m", tokenizer, **kwargs)


# -- 1: every number is checked where it enters -----------------------------------------------


@pytest.mark.parametrize("poison", [math.nan, math.inf, -math.inf, 0.5, True, "-0.25", [-1.0],
                                    {"value": -1.0}])
def test_an_impossible_log_probability_is_a_typed_error_not_a_number(
    serve: Any, tokenizer: Any, poison: Any
) -> None:
    server = serve(lambda seen: echo_answer(tokenizer, seen.body["prompt"], last=poison))
    rb = client(server, tokenizer)
    with pytest.raises(BackendError) as err:
        rb.score_continuations([REQUEST])
    message = str(err.value)
    assert "token_logprobs[" in message and "Gustave Eiffel" in message, message
    assert "Fix:" in message and "no decision was made" in message
    assert len(server.seen) == 1  # broken numbers are not retried: they would come again


def test_log_probabilities_at_zero_within_rounding_are_numbers(serve: Any, tokenizer: Any
                                                               ) -> None:
    for last in (0.0, -0.0, 1e-4, -1e-300):
        server = serve(lambda seen, last=last: echo_answer(tokenizer, seen.body["prompt"],
                                                           last=last))
        rb = client(server, tokenizer)
        (score,) = rb.score_continuations([REQUEST])
        assert score.num_tokens == rb.count_tokens(REQUEST.continuation)
        assert score.logprob_sum == pytest.approx(-0.5 * (score.num_tokens - 1) + last)
    server = serve(lambda seen: echo_answer(tokenizer, seen.body["prompt"], last=0.01))
    with pytest.raises(BackendError, match="above 0"):
        client(server, tokenizer).score_continuations([REQUEST])


# -- the alignment is verified, not assumed ---------------------------------------------------


def lie(tokenizer: Any, how: str) -> Any:
    """A ``respond`` echoing every prompt with one lie ``how``; each was scored before."""

    def respond(seen: Seen) -> Answer:
        prompt = seen.body["prompt"]
        if how == "rewritten":  # the context rewritten, as many tokens as before
            prompt = prompt.replace("tower", "bridge")
        if how == "truncated":  # the context cut, the echoed text still the one sent
            answer = echo_answer(tokenizer, prompt)
            answer.body["usage"]["prompt_tokens"] -= 7  # type: ignore[index]
            return answer
        answer = echo_answer(tokenizer, prompt)
        logprobs = answer.body["choices"][0]["logprobs"]  # type: ignore[index]
        if how == "no tokens":
            del logprobs["tokens"]
        elif how == "extra value":  # one more number than tokens: the tail shifts by one
            logprobs["token_logprobs"].insert(-3, -0.01)
        elif how == "tokens not text":
            logprobs["tokens"][-2] = 7
        elif how == "count not a number":
            answer.body["usage"]["prompt_tokens"] = "55"  # type: ignore[index]
        elif how == "huge":  # finite numbers whose sum is -inf
            logprobs["token_logprobs"][-3:-1] = [-1e308, -1e308]
        elif how == "nan":
            logprobs["token_logprobs"][-2] = math.nan
        return answer

    return respond


@pytest.mark.parametrize(("how", "match"), [
    ("no tokens", "logprobs.tokens is missing"),
    ("extra value", r"entries for \d+ log-probabilities"),
    ("tokens not text", r"tokens\[\d+\] is a int"),
    ("rewritten", "echoed a prompt other than the one sent"),
    ("truncated", r"usage.prompt_tokens is \d+, but the text sent is \d+ tokens"),
    ("count not a number", "not a token count"),
    ("huge", r"is -1e\+308, below"),
])
def test_a_server_that_lies_about_the_alignment_is_a_typed_error(
    serve: Any, tokenizer: Any, how: str, match: str
) -> None:
    server = serve(lie(tokenizer, how))
    rb = client(server, tokenizer)
    with pytest.raises(BackendError, match=match) as err:
        rb.score_continuations([REQUEST])
    assert "Fix:" in str(err.value)
    assert len(server.seen) == 1  # a lie is not retried: it would come again


def per_character(seen: Seen) -> Answer:
    """A server whose tokenizer is not the client's: one token per character."""
    prompt = seen.body["prompt"]
    answer = echo_tokens(list(prompt), prompt)
    del answer.body["usage"]["prompt_tokens"]  # type: ignore[index]  # (it may not say)
    return answer


def split_as(tokenizer: Any, style: str) -> Any:
    """A server with the client's tokenizer that prints a character split across tokens
    as U+FFFD in each part ("replacement", as the local tokenizer does), as nothing
    ("nothing": llama-cpp-python, measured) or whole on its last token ("whole":
    vLLM's incremental decoding)."""

    def respond(seen: Seen) -> Answer:
        ids = tokenizer(seen.body["prompt"], add_special_tokens=False).input_ids
        pieces = [tokenizer.decode([i]) for i in ids]
        if style == "nothing":
            pieces = [p.replace("\ufffd", "") for p in pieces]
        elif style == "whole":
            done, pieces = "", []
            for k in range(len(ids)):
                text = tokenizer.decode(ids[:k + 1])
                complete = "\ufffd" not in text[len(done):]
                pieces.append(text[len(done):] if complete else "")
                done = text if complete else done
        return echo_tokens(pieces, seen.body["prompt"])

    return respond


def test_every_character_is_compared_split_or_not_and_another_tokenizer_is_refused(
    serve: Any, tokenizer: Any
) -> None:
    # SmolLM2 splits "Л", "Т", "á", "東" and "京" across byte-level tokens. However a
    # matching server prints those, the answer is accepted.
    for answer in (" Лев Толстой", " Goiás", " 東京 km²", " Gustave Eiffel"):
        request = ContinuationRequest(REQUEST.prompt, answer)
        for style in ("replacement", "nothing", "whole"):
            rb = client(serve(split_as(tokenizer, style)), tokenizer)
            (score,) = rb.score_continuations([request])
            assert score.num_tokens == rb.count_tokens(answer), (answer, style)
            assert score.logprob_sum == pytest.approx(-0.5 * score.num_tokens), (answer, style)
    # The old check compared ASCII characters only: "Лев Толстой" is 11 characters and 9
    # SmolLM2 tokens, so under a one-token-per-character server its last 9 characters ("в
    # Толстой") were taken for the answer, "" compared with "" and the space with the space.
    request = ContinuationRequest("Вопрос: Кто написал «Войну и мир»?\nОтвет: ", "Лев Толстой")
    rb = client(serve(per_character), tokenizer)
    with pytest.raises(BackendError, match="does not match the served model") as err:
        rb.score_continuations([request])
    assert "Лев Толстой" in str(err.value)


def odd_echo(**logprobs: Any) -> Answer:
    return Answer(body={"choices": [{"text": "x", "logprobs": logprobs}],
                        "usage": {"completion_tokens": True}})


@pytest.mark.parametrize(("answer", "match"), [
    (Answer(body="<html>busy</html>"), "not JSON"),
    (Answer(body='{"choices": [{"text": "Par'), "not JSON"),
    (Answer(body="[" * 100_000 + "]" * 100_000), "not JSON"),  # nested 100,000 deep
    (Answer(body='{"n": ' + "9" * 5_000 + "}"), "not JSON"),  # over Python's 4,300 digits
    (Answer(body=[1, 2]), "not an object"),
    (Answer(body={}), "without choices"),
    (Answer(body={"choices": "Paris"}), "without choices"),
    (Answer(body={"choices": [None]}), "without choices"),
    (odd_echo(), "no prompt log-probabilities"),  # the field is missing
    (odd_echo(token_logprobs="-1.0"), "no prompt log-probabilities"),
    (odd_echo(token_logprobs=[None, -1.0]), "too few"),
    (Answer(status=200, body=b"\xff\xfe\x00"), "not JSON"),
])
def test_a_malformed_answer_is_a_typed_error(serve: Any, tokenizer: Any, answer: Answer,
                                             match: str) -> None:
    server = serve(lambda seen: answer)
    with pytest.raises(BackendError, match=match):
        client(server, tokenizer).score_continuations([REQUEST])


@pytest.mark.parametrize("text", [7, 1.5, True, ["Paris"], {"answer": "Paris"}])
def test_a_generation_that_is_not_text_is_a_typed_error(serve: Any, tokenizer: Any,
                                                        text: Any) -> None:
    server = serve(lambda seen: Answer(body={"choices": [{"text": text}]}))
    with pytest.raises(BackendError, match=r"choices\[0\]\.text is a .*, not text") as err:
        client(server, tokenizer).generate(["q"], 4)
    assert "Fix:" in str(err.value)


def test_a_redirect_with_a_json_body_is_an_error_not_an_answer(serve: Any,
                                                               tokenizer: Any) -> None:
    # httpx does not follow redirects; before, the redirect's own JSON body was the answer.
    from urllib.parse import quote

    where = f"https://admin:{quote(PASSWORD, safe='')}@elsewhere:8443/v1/completions?key=k"
    server = serve(lambda seen: Answer(302, {"choices": [{"text": "Paris"}]},
                                       {"Location": where}))
    with pytest.raises(BackendError, match="HTTP 302, a redirect to "
                       "'https://elsewhere:8443/v1/completions'") as err:
        client(server, tokenizer).generate(["q"], 4)
    assert "admin" not in str(err.value) and "Fix:" in str(err.value)
    assert len(server.seen) == 1


@pytest.mark.parametrize("key", ["sk-ключ-7", "sk-\u00e9t\u00e9", "sk-line\nbreak", "sk-\x7f"])
@pytest.mark.parametrize("from_env", [False, True])
def test_an_api_key_no_header_can_carry_is_a_typed_error_naming_its_source(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch, key: str, from_env: bool
) -> None:
    # Before: a UnicodeEncodeError traceback from inside httpx (or a split header).
    if from_env:
        monkeypatch.setenv("TRUSTMARGIN_REMOTE_API_KEY", key)
    with pytest.raises(InvalidInputError) as err:
        OpenAICompatBackend("http://127.0.0.1:1", "m", tokenizer,
                            **({} if from_env else {"api_key": key}))
    assert err.value.field == ("TRUSTMARGIN_REMOTE_API_KEY" if from_env else "api_key")
    assert key not in str(err.value) and "Fix:" in str(err.value)


# -- 4: bounded waits ----------------------------------------------------------------------------


def test_a_server_that_never_answers_is_given_up_within_the_total(serve: Any,
                                                                   tokenizer: Any) -> None:
    server = serve(lambda seen: Answer(hang=True))
    rb = client(server, tokenizer, read_timeout_s=0.4, timeout_s=1.5, max_retries=50)
    took, error = elapsed(lambda: rb.generate(["q"], 4))
    assert isinstance(error, BackendError), error
    assert "timed out" in str(error) and "TRUSTMARGIN_REMOTE_TIMEOUT" in str(error)
    assert took < 1.5 + 1.0, took  # the total bounds every attempt and every pause
    assert 2 <= len(server.seen) <= 4  # retried while time was left, not 51 times


def test_the_waits_come_from_the_environment(serve: Any, tokenizer: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_READ_TIMEOUT", "0.3")
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_TIMEOUT", "1")
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_RETRIES", "0")
    server = serve(lambda seen: Answer(hang=True))
    rb = client(server, tokenizer)
    assert rb.waits == Waits(connect_timeout_s=10.0, read_timeout_s=0.3, timeout_s=1.0,
                             max_retries=0)
    took, error = elapsed(lambda: rb.generate(["q"], 4))
    assert isinstance(error, BackendError) and "1 attempt(s): timed out" in str(error)
    assert took < 1.5, took
    # An argument wins over the environment.
    assert client(server, tokenizer, max_retries=3).waits.max_retries == 3


def test_the_default_worst_case_is_two_minutes_not_twenty_five() -> None:
    waits = Waits()
    assert waits.timeout_s == 120.0 and waits.read_timeout_s <= waits.timeout_s
    assert waits.connect_timeout_s == 10.0 and waits.max_retries == 2


@pytest.mark.parametrize(("name", "value"), [
    ("TRUSTMARGIN_REMOTE_TIMEOUT", "soon"), ("TRUSTMARGIN_REMOTE_TIMEOUT", "nan"),
    ("TRUSTMARGIN_REMOTE_READ_TIMEOUT", "-1"), ("TRUSTMARGIN_REMOTE_CONNECT_TIMEOUT", "inf"),
    ("TRUSTMARGIN_REMOTE_RETRIES", "2.5"), ("TRUSTMARGIN_REMOTE_RETRIES", "-1"),
])
def test_a_bad_wait_setting_names_the_variable(tokenizer: Any, monkeypatch: pytest.MonkeyPatch,
                                               name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInputError) as err:
        OpenAICompatBackend("http://127.0.0.1:1", "m", tokenizer)
    assert err.value.field == name


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"timeout_s": math.nan}, "timeout_s"), ({"timeout_s": 0}, "timeout_s"),
    ({"read_timeout_s": True}, "read_timeout_s"), ({"connect_timeout_s": "5"},
                                                   "connect_timeout_s"),
    ({"max_retries": -1}, "max_retries"), ({"max_retries": 1.5}, "max_retries"),
    ({"backoff_s": math.inf}, "backoff_s"), ({"backoff_s": -1}, "backoff_s"),
])
def test_a_bad_wait_argument_is_a_typed_error(tokenizer: Any, kwargs: dict[str, Any],
                                              field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        OpenAICompatBackend("http://127.0.0.1:1", "m", tokenizer, **kwargs)
    assert err.value.field == field


def test_an_answer_that_trickles_is_cut_at_the_total(serve: Any, tokenizer: Any) -> None:
    # One byte every 50 ms: each read is fast, so only the total bound can stop it.
    server = serve(lambda seen: Answer(body={"choices": [{"text": "x" * 400}]},
                                       trickle_s=0.05))
    rb = client(server, tokenizer, read_timeout_s=1, timeout_s=1.0, max_retries=0)
    took, error = elapsed(lambda: rb.generate(["q"], 4))
    assert isinstance(error, BackendError) and "did not complete" in str(error), error
    assert took < 2.5, took


@pytest.mark.slow
def test_a_server_that_trickles_its_headers_or_body_is_cut_at_the_deadline(
    serve: Any, tokenizer: Any
) -> None:
    # One byte a second from the status line on (or from the body on): every read returns
    # within the 2 s read timeout, so before one deadline covered connect, headers and body
    # a 3 s request ran for minutes (as reported: 120 s for a 5 s request).
    for trickle in ("trickle_headers_s", "trickle_s"):
        server = serve(lambda seen, t=trickle: Answer(body={"choices": [{"text": "Paris"}]},
                                                      **{t: 1.0}))
        rb = client(server, tokenizer, read_timeout_s=2, timeout_s=3)
        took, error = elapsed(lambda rb=rb: rb.generate(["q"], 4))
        assert isinstance(error, BackendError), (trickle, error)
        assert "did not complete within the 3 s total" in str(error), error
        assert took < 3 * 3, (trickle, took)  # a correctness bound (3x), not a speed goal


def test_the_tokenizer_check_is_bounded_and_reads_only_lists_of_token_ids(
    serve: Any, tokenizer: Any
) -> None:
    # Before: a tokenize endpoint trickling its headers held the check for minutes per
    # endpoint; an answer that is not JSON, not an object or not integers was a traceback.
    server = serve(lambda seen: Answer(body={"tokens": [1]}, trickle_headers_s=1.0))
    rb = client(server, tokenizer, timeout_s=2, read_timeout_s=2)
    took, error = elapsed(rb.check_tokenizer)
    assert isinstance(error, BackendError) and "no tokenize endpoint" in str(error), error
    assert took < 3 * 2 * 2, took  # two endpoints, each within its 2 s (3x: a bound)
    for body in ("<html>", [1, 2], {"tokens": ["a"]}, {"tokens": [True]}):
        server = serve(lambda seen, b=body: Answer(body=b))
        with pytest.raises(BackendError, match="no tokenize endpoint"):
            client(server, tokenizer).check_tokenizer()


NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(("header", "seconds"), [
    (None, None), ("", None), ("2", 2.0), ("0.25", 0.25), ("0", 0.0), ("-5", 0.0),
    ("nan", None), ("NaN", None), ("inf", None), ("-inf", None), ("soon", None),
    ("1e308", MAX_RETRY_AFTER_S), ("99999999", MAX_RETRY_AFTER_S),
    (format_datetime(NOW + timedelta(seconds=7), usegmt=True), 7.0),
    (format_datetime(NOW - timedelta(days=3), usegmt=True), 0.0),
    (format_datetime(NOW + timedelta(days=300), usegmt=True), MAX_RETRY_AFTER_S),
    ("Mon, 99 Foo 2025 25:61:00 GMT", None),
])
def test_retry_after_is_bounded_and_never_negative(header: str | None,
                                                   seconds: float | None) -> None:
    assert retry_after_seconds(header, now=NOW) == seconds


@pytest.mark.parametrize("header", ["-5", "nan", "inf", "soon", "Wed, 21 Oct 2015 07:28:00 GMT",
                                    "0", "9" * 400])
def test_every_retry_after_variant_is_handled_end_to_end(serve: Any, tokenizer: Any,
                                                         header: str) -> None:
    server = serve(scripted([Answer(429, "slow down", {"Retry-After": header}),
                             Answer(500, "oops"), OK_TEXT]))
    rb = client(server, tokenizer, max_retries=2)
    took, error = elapsed(lambda: rb.generate(["q"], 4))
    assert error is None and took < 2.0, (error, took)
    assert (len(server.seen), rb.retries) == (3, 2)


def test_a_retry_after_longer_than_the_time_left_fails_at_once(serve: Any, tokenizer: Any
                                                               ) -> None:
    future = format_datetime(datetime.now(timezone.utc) + timedelta(hours=1), usegmt=True)
    for header in ("1e308", future, "25"):
        server = serve(lambda seen, h=header: Answer(503, "busy", {"Retry-After": h}))
        rb = client(server, tokenizer, timeout_s=5, max_retries=3)
        took, error = elapsed(lambda rb=rb: rb.generate(["q"], 4))
        assert isinstance(error, BackendError) and "HTTP 503" in str(error), error
        assert took < 1.5 and len(server.seen) == 1, (header, took)  # no pause past the total


# -- 7 and 10: secrets -----------------------------------------------------------------------------

PASSWORD = "se/PW@9f2-never"


def echo_auth(seen: Seen) -> Answer:
    """A server that quotes the request's credentials back in its error."""
    auth = seen.headers.get("authorization", "")
    return Answer(401, f'{{"error": "denied", "headers": {{"Authorization": "{auth}"}}, '
                       f'"got": "{auth}", "raw": "{auth.split()[-1] if auth else ""}"}}')


def secret_forms(user: str, password: str) -> list[str]:
    from urllib.parse import quote

    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    return [password, quote(password, safe=""), basic, basic.rstrip("=")]


@pytest.mark.parametrize("typed", ["raw", "percent-encoded"])
def test_a_password_with_slash_and_at_never_shows_in_any_form(
    serve: Any, tokenizer: Any, caplog: pytest.LogCaptureFixture, typed: str
) -> None:
    from urllib.parse import quote

    server = serve(echo_auth)
    shown = PASSWORD if typed == "raw" else quote(PASSWORD, safe="")
    url = server.url.replace("//", f"//admin:{shown}@")
    caplog.set_level(logging.DEBUG)
    rb = client(server, tokenizer, url=url)
    with pytest.raises(BackendError, match="HTTP 401") as err:
        rb.generate(["q"], 2)
    basic = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()
    assert server.seen[0].headers["authorization"] == f"Basic {basic}"  # sent, decoded
    assert rb.url == server.url
    for text in (str(err.value), repr(rb), caplog.text):
        for form in secret_forms("admin", PASSWORD):
            assert form not in text, (form, text)
    assert "127.0.0.1" in str(err.value)


def test_an_echoed_bearer_key_never_shows(serve: Any, tokenizer: Any) -> None:
    key = "sk-live-3b9e0d7a-never"
    server = serve(echo_auth)
    with pytest.raises(BackendError) as err:
        client(server, tokenizer, api_key=key).generate(["q"], 2)
    assert server.seen[0].headers["authorization"] == f"Bearer {key}"
    assert key not in str(err.value) and "Bearer ***" in str(err.value)


@pytest.mark.parametrize("from_env", [False, True])
def test_an_api_key_wins_over_url_credentials_with_one_warning(
    serve: Any, tokenizer: Any, monkeypatch: pytest.MonkeyPatch, from_env: bool
) -> None:
    key = "sk-env-51c2-never"
    server = serve(lambda seen: OK_TEXT)
    url = server.url.replace("//", f"//admin:{PASSWORD}@")
    if from_env:
        monkeypatch.setenv("TRUSTMARGIN_REMOTE_API_KEY", key)
    with pytest.warns(UserWarning, match="API key is sent") as caught:
        rb = client(server, tokenizer, url=url, **({} if from_env else {"api_key": key}))
    assert len(caught) == 1
    warning = str(caught[0].message)
    assert ("TRUSTMARGIN_REMOTE_API_KEY" in warning) == from_env
    assert key not in warning and PASSWORD not in warning
    rb.generate(["q"], 2)
    assert server.seen[0].headers["authorization"] == f"Bearer {key}"


# -- 1 and 4 through the command: a NaN server, then the fixed server --------------------------

RECORDS = [
    {"id": "tower", "question": "Who designed the Eiffel Tower?",
     "passages": ["The Eiffel Tower was designed by the company of Gustave Eiffel."],
     "direct_answer": "Gustave Eiffel", "rag_answer": "Stephen Sauvestre"},
    {"id": "louvre", "question": "In which city is the Louvre?",
     "passages": ["The Louvre is the world's most visited museum, in Paris."],
     "direct_answer": "Lyon", "rag_answer": "Paris"},
]


def score(server: FaultServer, src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRUSTMARGIN_REMOTE_RETRIES": "0",
           "TRUSTMARGIN_REMOTE_TIMEOUT": "60"}
    return subprocess.run(
        [sys.executable, "-m", "trustmargin_integrations", "score", "-i", str(src), "-o",
         str(out), "--remote-url", server.url, "--remote-model", "m", "--batch-size", "1"],
        capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize(("how", "said"), [
    ("nan", "is NaN"),
    ("extra value", "entries for"),
    ("huge", "below -1e+06"),
])
def test_score_against_a_lying_server_fails_typed_caches_nothing_and_recovers(
    serve: Any, tokenizer: Any, tmp_path: Path, how: str, said: str
) -> None:
    # Before: "extra value" gave a wrong margin that was cached and reused after the server
    # was fixed; "huge" (finite numbers summing to -inf) a pydantic traceback and exit 1.
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    broken = {"now": True}
    liar = lie(tokenizer, how)

    def respond(seen: Seen) -> Answer:
        if broken["now"] and seen.body["prompt"].endswith("Lyon"):
            return liar(seen)
        return echo_answer(tokenizer, seen.body["prompt"])

    server = serve(respond)
    failed = score(server, src, out)
    assert failed.returncode == 2, failed.stderr
    assert "Traceback" not in failed.stderr and "Fix:" in failed.stderr, failed.stderr
    assert said in failed.stderr, failed.stderr
    assert not out.exists()
    cached = [json.loads(line)["value"] for line in (tmp_path / "out.jsonl.cache")
              .read_text().splitlines() if line.strip()]
    assert [d["id"] for d in cached] == ["tower"]  # the lied-about record has no decision

    broken["now"] = False
    rerun = score(server, src, out)
    assert rerun.returncode == 0, rerun.stderr
    assert "1 computed, 1 reused" in rerun.stdout
    decisions = [json.loads(line) for line in out.read_text().splitlines()]
    assert [d["id"] for d in decisions] == ["tower", "louvre"]
    assert all(d["m"] is not None and math.isfinite(d["m"]) for d in decisions)
