"""The HTTP layer of the OpenAI-compatible backend: one bounded, retried JSON POST.

Retried (tenacity) after a 408/409/425/429/5xx, a timeout or a dropped connection, pausing as
``Retry-After`` asks or with exponential backoff, every attempt within the total ``timeout_s``
(:mod:`trustmargin_integrations.deadline`). Every failure is a secret-free
:class:`~trustmargin_integrations.errors.BackendError`; one that outlasted every retry is a
:class:`~trustmargin_integrations.errors.ServerUnavailableError`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any

import httpx
import tenacity

from trustmargin_integrations.backends.openai_compat.pacing import Pacer, QueuedBehindFailureError
from trustmargin_integrations.backends.openai_compat.settings import (
    ENV_PREFIX,
    ServerSettings,
)
from trustmargin_integrations.deadline import bound_by_deadline, request_deadline
from trustmargin_integrations.errors import BackendError, ServerUnavailableError
from trustmargin_integrations.urls import protect_logs, redact_url, scrub
from trustmargin_integrations.waits import retry_after_seconds

# The package's name, which the retry records have always carried and which
# urls.protect_logs filters (a filter sees only its own logger's records, not a child's).
logger = logging.getLogger(__package__)

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The largest answer read. An echo of an 8,000-token prompt is a few megabytes on vLLM and
llama-cpp-python; more than this is not a completions server."""

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Phrases servers use when the model cannot return prompt log-probabilities. Such a server
# will never succeed, so the request fails at once instead of being retried.
_NO_LOGPROBS_HINTS = ("logits_all", "logprobs is not supported", "prompt_logprobs",
                      "logprobs are not supported", "does not support logprobs")


class _RetryableError(Exception):
    """One attempt failed in a way a later attempt may not repeat (429/5xx, a timeout, a
    dropped connection); ``retry_after`` is the pause the server asked for, if any;
    ``setting`` the wait variable (``TIMEOUT``, ``READ_TIMEOUT``) whose limit ended it."""

    def __init__(self, reason: str, retry_after: float | None = None,
                 setting: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.setting = setting


class CompletionsTransport:
    """A connection pool to one server that POSTs JSON with bounded waits and retries.

    Args:
        settings: the checked server settings (root, credentials, key, waits, backoff).
        max_concurrency: connections kept open, one per request in flight.
        transport: an ``httpx`` transport to use instead of the network (proxies, tests).
    """

    def __init__(self, settings: ServerSettings, *, max_concurrency: int,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = settings.url
        self.waits = settings.waits
        key, credentials = settings.api_key, settings.credentials
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        protect_logs([key] if key else [])
        if key and credentials:
            # One Authorization header: the bearer key is what OpenAI-compatible servers
            # check (vLLM --api-key), so it wins; saying so beats a silent 401. stacklevel 3:
            # the warning points at the code that built the backend, past its __init__.
            warnings.warn(f"{self.url}: both {settings.api_key_source} and user:password@ in "
                          f"the URL were given; the API key is sent and the URL's credentials "
                          f"are dropped", UserWarning, stacklevel=3)
            credentials = None
        # backoff_s * 2**retry, capped at 30 s, plus up to half of backoff_s of jitter.
        self._backoff = (tenacity.wait_exponential(multiplier=settings.backoff_s, max=30.0)
                         + tenacity.wait_random(0, settings.backoff_s / 2))
        # bound_by_deadline: httpx bounds each socket operation, not a request; the deadline
        # set around each attempt bounds connect, headers and body together (deadline.py).
        self._client = bound_by_deadline(httpx.Client(
            base_url=settings.root, headers=headers, transport=transport,
            timeout=httpx.Timeout(self.waits.read_timeout_s,
                                  connect=self.waits.connect_timeout_s),
            auth=httpx.BasicAuth(*credentials) if credentials else None,
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency),
        ))
        # A request waits here, outside its deadline, while the server's queue is full.
        self._pacer = Pacer(min(self.waits.timeout_s, self.waits.read_timeout_s))
        self._lock = threading.Lock()
        self.requests_sent = 0
        self.retries = 0

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def try_post(self, path: str, body: Mapping[str, Any]) -> httpx.Response | None:
        """One POST with the pool's timeouts, within ``timeout_s`` in all, and no retry; None
        when it could not be sent or answered (for optional endpoints, which many servers
        lack)."""
        try:
            with request_deadline(self.waits.timeout_s):
                return self._client.post(path, json=body)
        except httpx.HTTPError:
            return None

    def post(self, path: str, body: Mapping[str, Any], units: int = 1) -> dict[str, Any]:
        """POST with retries, all within ``timeout_s`` from when it is sent; every failure
        becomes a BackendError without secrets.

        ``units`` is the request's work (its prompt tokens plus the tokens it may generate):
        it is sent once the work in flight on the server, with its own, fits half its
        deadline at the server's measured pace (:mod:`.pacing`)."""
        where = f"{self.url}{path}"
        try:
            with self._pacer.admitted(units):
                return self._post(path, body, where, units)
        except QueuedBehindFailureError:
            raise ServerUnavailableError(
                f"{where}: request not sent: one sent before it to this server failed after "
                f"every retry. Fix: check that the server is up and not overloaded") from None

    def _post(self, path: str, body: Mapping[str, Any], where: str,
              units: int) -> dict[str, Any]:
        began = time.monotonic()
        deadline = began + self.waits.timeout_s
        attempts = 0

        def attempt() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            return self._attempt(path, body, where, deadline)

        retrying = tenacity.Retrying(
            # stop_before_delay: never start a pause that would end past the total bound.
            stop=(tenacity.stop_after_attempt(self.waits.attempts)
                  | tenacity.stop_before_delay(self.waits.timeout_s)),
            wait=self._pause, retry=tenacity.retry_if_exception_type(_RetryableError),
            before_sleep=lambda state: self._note_retry(where, state), reraise=True,
        )
        try:
            return retrying(attempt)
        except _RetryableError as exc:
            self._pacer.failed_for_good()
            # Retries that stopped before their count ran out were stopped by the total.
            limits = [exc.setting] if exc.setting else []
            if attempts < self.waits.attempts and "TIMEOUT" not in limits:
                limits.append("TIMEOUT")
            raise ServerUnavailableError(
                f"{where} failed after {attempts} attempt(s): {exc.reason} "
                f"({time.monotonic() - began:.1f} s in all). Fix: "
                f"{self._fix(limits, units)}") from None

    def _fix(self, limits: list[str], units: int) -> str:
        """How to make a failed request succeed, naming each wait variable whose limit ended
        it and, when the server's pace is known, the time this request's work needs at it."""
        if not limits:
            return (f"check that the server is up and not overloaded, or raise "
                    f"{ENV_PREFIX}_RETRIES (max_retries, now {self.waits.max_retries})")
        fields = {"TIMEOUT": ("timeout_s", self.waits.timeout_s),
                  "READ_TIMEOUT": ("read_timeout_s", self.waits.read_timeout_s)}
        named = " and ".join(f"{ENV_PREFIX}_{limit} ({fields[limit][0]}, now "
                             f"{fields[limit][1]:g} s)" for limit in limits)
        needs = self._pacer.estimate_s(units)
        pace = (f"; this request carries {units:,} tokens, about {needs:.1f} s at the pace "
                f"this server has answered" if needs is not None else "")
        return f"raise {named}{pace}; or check that the server is up and not overloaded"

    def _pause(self, state: tenacity.RetryCallState) -> float:
        """The server's Retry-After when it gave a usable one, else exponential backoff."""
        failure = state.outcome.exception() if state.outcome else None
        if isinstance(failure, _RetryableError) and failure.retry_after is not None:
            return failure.retry_after
        return float(self._backoff(state))

    def _note_retry(self, where: str, state: tenacity.RetryCallState) -> None:
        with self._lock:
            self.retries += 1
        failure = state.outcome.exception() if state.outcome else None
        logger.info("retrying %s after %s (attempt %d of %d, waiting %.1f s)", where,
                    getattr(failure, "reason", failure), state.attempt_number,
                    self.waits.attempts, state.upcoming_sleep)

    def _attempt(self, path: str, body: Mapping[str, Any], where: str,
                 deadline: float) -> dict[str, Any]:
        """One POST; a failure a later attempt may not repeat raises :class:`_RetryableError`."""
        with self._lock:
            self.requests_sent += 1
        left = deadline - time.monotonic()
        if left <= 0:
            raise _RetryableError(f"no time left of the {self.waits.timeout_s:g} s total",
                                  setting="TIMEOUT")
        timeout = httpx.Timeout(min(self.waits.read_timeout_s, left),
                                connect=min(self.waits.connect_timeout_s, left))
        try:
            # One deadline for connect, headers and body: a server that trickles its
            # headers or body a byte at a time never lets a read time out by itself.
            with (request_deadline(left),
                  self._client.stream("POST", path, json=body, timeout=timeout) as response):
                raw = self._read_body(response, where, deadline)
        except httpx.TimeoutException:
            if time.monotonic() >= deadline:
                raise _RetryableError(self._late(), setting="TIMEOUT") from None
            raise _RetryableError(f"timed out: no answer within the "
                                  f"{self.waits.read_timeout_s:g} s read timeout",
                                  setting="READ_TIMEOUT") from None
        except httpx.TransportError as exc:
            raise _RetryableError(f"connection failed ({type(exc).__name__})") from None
        return _parse(response, raw, where)

    def _read_body(self, response: httpx.Response, where: str, deadline: float) -> bytes:
        """The body, read against the total deadline and a size cap (a server that trickles
        bytes or sends gigabytes cannot hold the caller)."""
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise BackendError(f"{where} sent more than {MAX_RESPONSE_BYTES:,} bytes. Fix: "
                                   "point base_url at an OpenAI-compatible completions server")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise _RetryableError(self._late(), setting="TIMEOUT")
        return b"".join(chunks)

    def _late(self) -> str:
        return (f"timed out: the answer did not complete within the "
                f"{self.waits.timeout_s:g} s total")


def _parse(response: httpx.Response, raw: bytes, where: str) -> dict[str, Any]:
    """A success's JSON object, or the typed failure an error status means."""
    status = response.status_code
    if 300 <= status < 400:
        # httpx does not follow redirects (a POST body and credentials would go wherever
        # the server points), and a redirect's own body is not the server's answer.
        target = scrub(redact_url(response.headers.get("location", "")))[:200] or "nowhere"
        raise BackendError(f"{where} answered HTTP {status}, a redirect to {target!r}, not "
                           "a completion. Fix: point base_url at the address the server "
                           "redirects to (often https:// instead of http://, or another "
                           "path)")
    if status < 400:
        try:
            # NaN / Infinity literals are read as floats and refused where each number
            # is used (answer_logprob), so the error can name the field.
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise BackendError(f"{where} answered HTTP {status} with a body that is not "
                               "JSON. Fix: point base_url at an OpenAI-compatible "
                               "server") from None
        if not isinstance(data, dict):
            raise BackendError(f"{where} answered with JSON that is not an object. Fix: "
                               "point base_url at an OpenAI-compatible server")
        return data
    # Servers may quote the request, credentials included: scrub before cutting, so no
    # part of a secret survives at the cut.
    detail = scrub(raw[:4000].decode("utf-8", "replace").replace("\n", " "))[:300]
    if any(hint in detail.lower() for hint in _NO_LOGPROBS_HINTS):
        raise BackendError(
            f"{where} cannot return prompt log-probabilities (HTTP {status}: "
            f"{detail}). Fix: llama-cpp-python needs logits_all=true; vLLM needs "
            "--max-logprobs >= 1 and a version with prompt logprobs"
        )
    if status not in RETRY_STATUS:
        raise BackendError(f"{where} answered HTTP {status}: {detail}")
    raise _RetryableError(f"HTTP {status}",
                          retry_after_seconds(response.headers.get("retry-after")))
