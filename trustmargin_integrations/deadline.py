"""One deadline per HTTP request: connect, headers and body, for every client we drive.

Wraps httpcore's network backend (``httpcore.NetworkBackend``) so that each connect, read and
write gets ``min(its timeout, time left)`` and ends with httpcore's own timeout error; the
deadline is set around one attempt with :func:`request_deadline` (a context variable, so each
thread keeps its own). Why our own code, and its limits (name resolution is not bounded):
docs/decisions.md, "One deadline per request".
"""

from __future__ import annotations

import ssl
import time
import typing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore
import httpx

_DEADLINE: ContextVar[float | None] = ContextVar("trustmargin_http_deadline", default=None)


@contextmanager
def request_deadline(seconds: float) -> Iterator[float]:
    """Every HTTP operation of this thread inside the block ends within ``seconds`` of now
    (connect, TLS, request and every byte of the answer; a surrounding deadline that ends
    sooner still holds). Yields the deadline as a ``time.monotonic()`` value."""
    ends = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(ends if outer is None else min(outer, ends))
    try:
        yield ends
    finally:
        _DEADLINE.reset(token)


def _bounded(timeout: float | None, failure: type[Exception]) -> float | None:
    """``timeout`` cut to the time left before the current deadline; ``failure`` when none
    is left (httpcore's own timeout exception, so httpx maps it as any other timeout)."""
    ends = _DEADLINE.get()
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0:
        raise failure("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read and write ends by the deadline of the request using it
    (a pooled connection serves many requests, so the deadline is looked up per call)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(
            ssl_context, server_hostname, _bounded(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with every connect bounded by the current deadline."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: typing.Iterable[typing.Any] | None = None
                    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(
            host, port, _bounded(timeout, httpcore.ConnectTimeout), local_address,
            socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None
                            ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(
            path, _bounded(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_by_deadline(client: httpx.Client) -> httpx.Client:
    """``client`` with :func:`request_deadline` in force on its own transports (the default
    one and each proxy's); returned for chaining.

    httpx does not let a caller pass a network backend, so the backend of each transport's
    httpcore pool (``HTTPTransport._pool._network_backend``, unchanged from httpx 0.23 to
    0.28) is wrapped in place. A transport the caller built (a mock, a custom proxy) is left
    as it is. Should a later httpx move the pool, a warning says the deadline covers only
    what the caller checks itself, and the tests of trickled answers fail.
    """
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        if not isinstance(transport, httpx.HTTPTransport):
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            warnings.warn("this httpx keeps its connection pool elsewhere: a server that "
                          "trickles its headers is bounded only by the read timeout",
                          RuntimeWarning, stacklevel=2)
            continue
        if not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]
    return client
