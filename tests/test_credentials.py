"""Credentials in a server URL (an OpenAI-compatible server, Elasticsearch) never reach a log
record, an error text, a repr or the command's output, at INFO and DEBUG, on the real request
path: the real client against a real HTTP server on 127.0.0.1 that receives the password (as
basic auth) and quotes it back in an error.

Elasticsearch's own credentials in every form are in tests/test_elasticsearch.py.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fault_server import echo_answer
from score_support import QUESTION
from typer.testing import CliRunner

from trustmargin_integrations import InvalidInputError
from trustmargin_integrations.backends.openai_compat import OpenAICompatBackend, load_tokenizer
from trustmargin_integrations.cli import app
from trustmargin_integrations.errors import TrustMarginError
from trustmargin_integrations.retrieval.elasticsearch import ElasticsearchSettings

runner = CliRunner()

USER, SECRET = "reader", "hunter2-Zq9x"


class _Completions(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/completions endpoint on 127.0.0.1: echo requests get
    an honest echo (the prompt, its SmolLM2 tokens, one log-probability per token at -0.5:
    the client verifies all of it), generation requests get "Paris". A prompt ending in
    "FAIL" gets HTTP 400 with a body that quotes the password, as some servers quote
    credentials back."""

    seen: ClassVar[list[str | None]] = []
    tokenizer: ClassVar[Any] = None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(self.headers.get("Authorization"))
        status, answer = 200, {"choices": [{"text": "Paris"}]}
        if str(body.get("prompt", "")).endswith("FAIL"):
            status, answer = 400, {"error": f"bad password {SECRET} for user {USER}"}
        elif body.get("echo"):
            answer = echo_answer(type(self).tokenizer, body["prompt"]).body  # type: ignore[assignment]
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 (an ephemeral port), stopped after the test."""
    _Completions.seen = []
    _Completions.tokenizer = _Completions.tokenizer or load_tokenizer("smollm2-135m")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage() + (self.formatException(record.exc_info)
                                      if record.exc_info else "")
        self.messages.append((record.name, text))


@contextmanager
def _logging_at(level: int) -> Iterator[_Records]:
    root = logging.getLogger()
    handler, old = _Records(), root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def _secret_forms() -> tuple[str, str]:
    return SECRET, base64.b64encode(f"{USER}:{SECRET}".encode()).decode()


@pytest.mark.parametrize("level", [logging.INFO, logging.DEBUG])
def test_no_log_record_carries_the_password(server: str, demo_corpus_jsonl: Path, level: int,
                                            backend: Any) -> None:
    url = f"http://{USER}:{SECRET}@{server}"
    with _logging_at(level) as records:
        result = runner.invoke(app, ["ask", QUESTION, "--corpus", str(demo_corpus_jsonl),
                                     "--remote-url", url, "--direct-answer", "Gustave Eiffel",
                                     "--rag-answer", "Marta Okonkwo", "--json"])
        assert result.exit_code == 0, (result.output, result.exception)
        remote = OpenAICompatBackend(url, "smollm2", backend.tokenizer, max_concurrency=2)
        assert remote.generate(["Question: capital of France?"], 2) == ["Paris"]
        texts = [repr(remote), remote.url, result.output]
        remote.close()
    # The real request path ran: the password really travelled (as basic auth) ...
    basic = f"Basic {_secret_forms()[1]}"
    assert _Completions.seen and set(_Completions.seen) == {basic}
    # ... and httpx/httpcore logged those requests, yet no record shows it.
    names = {name for name, _ in records.messages}
    assert "httpx" in names, names
    if level == logging.DEBUG:
        assert any(n.startswith("httpcore") for n in names), names
    for form in _secret_forms():
        leaked = [(n, m) for n, m in records.messages if form in m]
        assert not leaked, leaked
        assert all(form not in text for text in texts)


def test_server_error_texts_never_carry_the_password(server: str, backend: Any) -> None:
    remote = OpenAICompatBackend(f"http://{USER}:{SECRET}@{server}", "smollm2",
                                 backend.tokenizer, max_retries=0)
    with _logging_at(logging.DEBUG) as records, pytest.raises(TrustMarginError) as err:
        remote.generate(["FAIL"], 2)
    remote.close()
    assert "HTTP 400" in str(err.value)
    for form in _secret_forms():
        assert form not in str(err.value), str(err.value)
        assert not [m for _, m in records.messages if form in m]


def test_schemeless_credentials_are_never_echoed(demo_corpus_jsonl: Path) -> None:
    for args in (["--remote-url", f"{USER}:{SECRET}@127.0.0.1:8000"],
                 ["--remote-url", f"http://{USER}:{SECRET}@127.0.0.1:abc"],
                 ["--elasticsearch", f"{USER}:{SECRET}@127.0.0.1:9200"],
                 ["--elasticsearch", f"{USER}:{SECRET}@127.0.0.1:abc"]):
        extra = ["--corpus", str(demo_corpus_jsonl)] if args[0] == "--remote-url" else []
        result = runner.invoke(app, ["ask", QUESTION, *extra, *args])
        assert isinstance(result.exception, InvalidInputError), (args, result.exception)
        assert SECRET not in str(result.exception) and SECRET not in result.output
        assert "127.0.0.1" in str(result.exception)  # the place is still named
    settings = ElasticsearchSettings(f"http://{USER}:{SECRET}@127.0.0.1:9200")
    assert SECRET not in repr(settings) and SECRET not in settings.safe_url
