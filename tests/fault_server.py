"""A fault-injecting OpenAI-compatible HTTP server on 127.0.0.1, for tests.

Not part of the library. A real server (vLLM, llama.cpp) cannot be made to answer NaN, hang
or echo the Authorization header on demand; this one can, and the client under test still
runs for real: httpx, its sockets, timeouts and logging. It answers what ``respond`` returns
for each request and records every request in ``seen``.

Bounded: it binds 127.0.0.1 only (an ephemeral port), a hanging answer waits at most
``HANG_LIMIT_S`` or until :meth:`FaultServer.stop`, and the context manager always stops it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG_LIMIT_S = 60.0
"""The longest a hanging answer holds its connection (the client must give up first)."""


@dataclass
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    """What to send back: a status, headers and a body (a dict is written as JSON with NaN
    and Infinity literals, as Python-based servers do); ``hang`` never answers; ``trickle_s``
    sends the body one byte at a time with that pause between bytes; ``trickle_headers_s``
    does the same from the status line on (the answer never gets past its headers in time,
    however short each pause: the slowloris of a server)."""

    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    trickle_s: float = 0.0
    trickle_headers_s: float = 0.0

    def payload(self) -> bytes:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body, allow_nan=True).encode()
        return self.body.encode() if isinstance(self.body, str) else self.body


def echo_answer(tokenizer: Any, prompt: str, logprob: Any = -0.5,
                last: Any = None) -> Answer:
    """A llama-cpp-python style echo of ``prompt``: its text and one generated ``.``, its
    tokens (no BOS), every prompt token at ``logprob`` and the last one (inside the answer)
    at ``last`` when given, whatever it is (NaN, a string, a bool)."""
    ids = tokenizer(prompt, add_special_tokens=False).input_ids
    return echo_tokens([tokenizer.decode([i]) for i in ids], prompt, logprob, last)


def echo_tokens(tokens: list[str], prompt: str, logprob: Any = -0.5, last: Any = None,
                prompt_tokens: Any = None) -> Answer:
    """An echo of ``prompt`` as the given token texts (a tokenizer of the server's own) and
    one generated ``.``; ``prompt_tokens`` replaces the reported count (default: the
    number of tokens)."""
    values: list[Any] = [None] + [logprob] * (len(tokens) - 1) + [-1.0]
    if last is not None:
        values[len(tokens) - 1] = last
    count = len(tokens) if prompt_tokens is None else prompt_tokens
    return Answer(body={"choices": [{"text": prompt + ".", "index": 0,
                                     "logprobs": {"tokens": [*tokens, "."],
                                                  "token_logprobs": values}}],
                        "usage": {"prompt_tokens": count, "completion_tokens": 1}})


class FaultServer:
    """A local HTTP server answering each POST with ``respond(seen)``.

    Args:
        respond: the answer to one request (it may count calls to change its answers).

    Example:
        >>> with FaultServer(lambda seen: Answer(500)) as server:  # doctest: +SKIP
        ...     OpenAICompatBackend(server.url, "m", tokenizer)
    """

    def __init__(self, respond: Callable[[Seen], Answer]) -> None:
        self.respond = respond
        self.seen: list[Seen] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fault-server", daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw
                seen = Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with outer._lock:
                    outer.seen.append(seen)
                outer._send(self, outer.respond(seen))

            do_GET = do_POST  # noqa: N815

            def log_message(self, *args: Any) -> None:
                return  # quiet: the test output is the client's

        return Handler

    def _send(self, handler: BaseHTTPRequestHandler, answer: Answer) -> None:
        if answer.hang:
            self._stopping.wait(HANG_LIMIT_S)
            return
        payload = answer.payload()
        headers = {"Content-Type": "application/json", "Content-Length": str(len(payload)),
                   **answer.headers}
        if answer.trickle_headers_s:
            head = "".join([f"HTTP/1.1 {answer.status} X\r\n",
                            *(f"{k}: {v}\r\n" for k, v in headers.items()), "\r\n"])
            handler.close_connection = True
            self._trickle(handler, head.encode("latin-1") + payload, answer.trickle_headers_s)
            return
        handler.send_response(answer.status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        if not answer.trickle_s:
            handler.wfile.write(payload)
            return
        self._trickle(handler, payload, answer.trickle_s)

    def _trickle(self, handler: BaseHTTPRequestHandler, data: bytes, pause_s: float) -> None:
        """Send ``data`` one byte at a time, ``pause_s`` apart, until done, stopped or the
        client hangs up."""
        for byte in data:
            if self._stopping.wait(pause_s):
                return
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:
                return  # the client gave up

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hanging answers, stop serving and close the socket."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def scripted(answers: Sequence[Answer], then: Answer | None = None
             ) -> Callable[[Seen], Answer]:
    """A ``respond`` giving ``answers`` in order, then ``then`` (default: the last one)."""
    queue = list(answers)
    lock = threading.Lock()
    final = then or queue[-1]

    def respond(seen: Seen) -> Answer:
        with lock:
            return queue.pop(0) if queue else final

    return respond


def elapsed(action: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Seconds ``action`` took and the exception it raised (None when it returned)."""
    began = time.monotonic()
    try:
        action()
    except Exception as exc:
        return time.monotonic() - began, exc
    return time.monotonic() - began, None



class Drifting:
    """A ``respond`` of an honest echo (every prompt token at ``logprob``) for its first
    ``honest`` requests, then of the same echo moved by ``shift`` nats per token: a server
    that passes a fleet's probe and drifts later (a model reloaded with other settings)."""

    def __init__(self, tokenizer: Any, honest: int, shift: float = -0.2,
                 logprob: float = -0.5) -> None:
        self.tokenizer, self.honest, self.shift, self.logprob = tokenizer, honest, shift, logprob
        self.answered = 0
        self._lock = threading.Lock()

    def __call__(self, seen: Seen) -> Answer:
        with self._lock:
            self.answered += 1
            late = self.answered > self.honest
        value = self.logprob + self.shift if late else self.logprob
        return echo_answer(self.tokenizer, seen.body["prompt"], logprob=value)
