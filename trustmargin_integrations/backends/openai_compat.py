"""A backend that scores and generates through an OpenAI-compatible ``/v1/completions`` server.

Works with vLLM and the llama.cpp server of ``llama-cpp-python`` (any server that can echo the
prompt with per-token log-probabilities).

How a likelihood is read from the server:

* The request is the rendered prompt and the answer as ONE string, with ``echo=true``,
  ``logprobs=1``, ``max_tokens=1`` and ``temperature=0``. The server returns a log-probability
  for every prompt token (the first one is ``null``) followed by the one generated token.
* The answer's tokens are taken from the END of the echoed sequence: the generated tokens
  (``usage.completion_tokens``, normally one) are dropped, then the last ``n`` entries are the
  answer, where ``n`` is the answer's token count from tokenizing it on its own, exactly as
  the local backend does. Counting from the end matters because servers differ at the start:
  vLLM returns the BOS token with a ``null`` log-probability, llama-cpp-python drops a leading
  BOS and also omits later tokens equal to BOS (``<|im_start|>`` in ChatML templates).
* The tail's token texts are checked against the answer, so a tokenizer that does not match
  the served model fails loudly instead of producing wrong numbers.
* The sum over those ``n`` log-probabilities divided by ``n`` is the length-normalized
  likelihood, identical to the local backend's definition.

Tokenization is done LOCALLY with the model's Hugging Face tokenizer (named model, directory
or GGUF file). It is needed anyway to render the same chat template as the local backend, and
it keeps ``count_tokens``/``truncate_tokens`` (called many times per question while the context
is cut to its budget) free of network round trips. :meth:`OpenAICompatBackend.check_tokenizer`
compares it with the server's own tokenize endpoint once.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import tenacity

from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    StopPredicate,
    cut_at_stop,
    plain_session,
)
from trustmargin_integrations.backends.tokens import LocalTokenizerMixin
from trustmargin_integrations.errors import BackendError, InvalidInputError, ModelLoadError
from trustmargin_integrations.urls import protect_logs, redact_url, scrub, split_credentials
from trustmargin_integrations.waits import Waits, retry_after_seconds

logger = logging.getLogger(__name__)

ENV_URL = "TRUSTMARGIN_REMOTE_URL"
ENV_MODEL = "TRUSTMARGIN_REMOTE_MODEL"
ENV_API_KEY = "TRUSTMARGIN_REMOTE_API_KEY"
ENV_PREFIX = "TRUSTMARGIN_REMOTE"
"""Prefix of the wait settings: ``TRUSTMARGIN_REMOTE_TIMEOUT``, ``..._CONNECT_TIMEOUT``,
``..._READ_TIMEOUT``, ``..._RETRIES`` (see :mod:`trustmargin_integrations.waits`)."""

MAX_RESPONSE_BYTES = 256 * 1024 * 1024
"""The largest answer read. An echo of an 8,000-token prompt is a few megabytes on vLLM and
llama-cpp-python; more than this is not a completions server."""
LOGPROB_TOLERANCE = 1e-3
"""How far above 0 a token log-probability may be: servers in half precision round a
certain token's ``log 1 = 0`` to a tiny positive number; anything larger is impossible."""

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Phrases servers use when the model cannot return prompt log-probabilities. Such a server
# will never succeed, so the request fails at once instead of being retried.
_NO_LOGPROBS_HINTS = ("logits_all", "logprobs is not supported", "prompt_logprobs",
                      "logprobs are not supported", "does not support logprobs")

_T = TypeVar("_T")
_R = TypeVar("_R")


class _RetryableError(Exception):
    """One attempt failed in a way a later attempt may not repeat (429/5xx, a timeout, a
    dropped connection); ``retry_after`` is the pause the server asked for, if any."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _root_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """The server root (``http://host:port`` or ``http://host:port/v1`` accepted) without
    credentials, and the ``user:password@`` credentials it held."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError("base_url", "is empty",
                                f"pass the server URL, e.g. http://127.0.0.1:8000, or set "
                                f"{ENV_URL}")
    # Credentials first: a password may hold a "/" that would otherwise end the host part.
    url, credentials = split_credentials(url.strip())
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError("base_url", f"{redact_url(url)!r} is not an http(s) URL",
                                "pass a URL such as http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when asked)
    except ValueError:
        raise InvalidInputError("base_url", f"{redact_url(url)!r} has a port that is not a "
                                "number", "pass a URL such as http://127.0.0.1:8000") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), credentials


def load_tokenizer(source: Any) -> Any:
    """A Hugging Face tokenizer from a named model, a directory, a ``.gguf`` file or a hub id.

    A tokenizer object (anything with ``apply_chat_template``) is returned unchanged.
    """
    if hasattr(source, "apply_chat_template"):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidInputError("tokenizer", f"is a {type(source).__name__}",
                                "pass a tokenizer, a named model such as 'smollm2-135m', a "
                                "model directory or a .gguf file")
    from transformers import AutoTokenizer

    from trustmargin_integrations.models import resolve_model

    _, local = resolve_model(str(source))
    try:
        return AutoTokenizer.from_pretrained(str(local) if local is not None else str(source))
    except OSError as exc:
        raise ModelLoadError(f"could not load the tokenizer of {source!r}: {exc}. Fix: pass the "
                             "served model's directory, .gguf file or named model") from exc


def _fold(text: str) -> str:
    # Byte-level tokens that split a multi-byte character decode to nothing on some servers,
    # so the tail check compares ASCII characters only.
    return "".join(ch for ch in text if ch.isascii())


class OpenAICompatBackend(LocalTokenizerMixin):
    """The Backend protocol over an OpenAI-compatible completions server.

    Args:
        base_url: server root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted).
        model: the model name the server serves (the ``model`` field of each request).
        tokenizer: the served model's tokenizer (object, named model, directory or GGUF file).
        api_key: bearer token, if the server wants one (default: ``$TRUSTMARGIN_REMOTE_API_KEY``).
            It is sent in the ``Authorization`` header only, never logged or put in errors.
            A key wins over ``user:password@`` in ``base_url``: the URL's credentials are
            then dropped, with a warning that shows neither secret.
        max_concurrency: requests in flight at once.
        timeout_s: the bound on one request in seconds, every attempt and pause included
            (default ``$TRUSTMARGIN_REMOTE_TIMEOUT``, else 120). A request queued behind
            others on a one-at-a-time server such as llama-cpp-python waits for them too.
        connect_timeout_s: connect timeout of one attempt (``..._CONNECT_TIMEOUT``, 10).
        read_timeout_s: the longest silence while waiting for an answer
            (``..._READ_TIMEOUT``, 60).
        max_retries: retries after a 429/5xx answer, a timeout or a dropped connection
            (``$TRUSTMARGIN_REMOTE_RETRIES``, else 2).
        backoff_s: first retry delay; doubled per retry, with jitter, capped at 30 s. A
            ``Retry-After`` header replaces it (cut to 0-30 s).
        model_id: the name recorded in every Decision (default: ``model``).
        renderer: a function that applies the chat template; default: the tokenizer's.
        extra_body: extra JSON fields for every request (server-specific options); they
            override the defaults, e.g. ``{"add_special_tokens": True}``.
        transport: an ``httpx`` transport to use instead of the network (proxies, tests).
        context_window: the served model's window in tokens (default: the tokenizer's
            ``model_max_length`` when it is a real limit).

    Example:
        >>> backend = OpenAICompatBackend("http://127.0.0.1:8000", "smollm2",  # doctest: +SKIP
        ...                               tokenizer="smollm2-135m")
        >>> TrustMargin(backend).arbitrate("Who wrote Hamlet?", ["..."])  # doctest: +SKIP
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float | None = None,
        max_retries: int | None = None,
        backoff_s: float = 0.5,
        connect_timeout_s: float | None = None,
        read_timeout_s: float | None = None,
        model_id: str | None = None,
        renderer: Callable[[str], str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
        context_window: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("model", "is empty",
                                    "pass the served model name (GET /v1/models lists it)")
        if max_concurrency < 1:
            raise InvalidInputError("max_concurrency", f"must be >= 1, got {max_concurrency}",
                                    "allow at least one request in flight")
        self.waits = Waits.resolve(ENV_PREFIX, {
            "timeout_s": timeout_s, "connect_timeout_s": connect_timeout_s,
            "read_timeout_s": read_timeout_s, "max_retries": max_retries})
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or not (
                math.isfinite(backoff_s) and 0 <= backoff_s <= 30):
            raise InvalidInputError("backoff_s", f"must be from 0 to 30 seconds, got "
                                    f"{backoff_s!r}", "pass a short first delay such as 0.5")
        # Credentials leave the URL for an auth object, so no log line or error can show them.
        self._root, credentials = _root_url(base_url)
        self.url = redact_url(self._root)
        self.model = model
        self.model_id = model_id or model
        self.tokenizer = load_tokenizer(tokenizer)
        limit = getattr(self.tokenizer, "model_max_length", None)
        # Tokenizers without a limit report a huge sentinel (int(1e30)).
        self.context_window = context_window or (
            limit if isinstance(limit, int) and limit < 10_000_000 else None)
        self.max_concurrency = max_concurrency
        self.max_retries = self.waits.max_retries
        self.backoff_s = float(backoff_s)
        # backoff_s * 2**retry, capped at 30 s, plus up to half of backoff_s of jitter.
        self._backoff = (tenacity.wait_exponential(multiplier=self.backoff_s, max=30.0)
                         + tenacity.wait_random(0, self.backoff_s / 2))
        self.extra_body = dict(extra_body or {})
        self._renderer = renderer
        self._chat = self.has_chat_template
        key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        protect_logs([key] if key else [])
        if key and credentials:
            # One Authorization header: the bearer key is what OpenAI-compatible servers
            # check (vLLM --api-key), so it wins; saying so beats a silent 401.
            source = "api_key" if api_key is not None else ENV_API_KEY
            warnings.warn(f"{self.url}: both {source} and user:password@ in the URL were "
                          f"given; the API key is sent and the URL's credentials are dropped",
                          UserWarning, stacklevel=2)
            credentials = None
        self._client = httpx.Client(
            base_url=self._root, headers=headers, transport=transport,
            timeout=httpx.Timeout(self.waits.read_timeout_s,
                                  connect=self.waits.connect_timeout_s),
            auth=httpx.BasicAuth(*credentials) if credentials else None,
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency),
        )
        self._lock = threading.Lock()
        self.requests_sent = 0
        self.retries = 0

    @classmethod
    def from_env(cls, tokenizer: Any, **kwargs: Any) -> OpenAICompatBackend:
        """Build from ``$TRUSTMARGIN_REMOTE_URL``, ``$TRUSTMARGIN_REMOTE_MODEL`` (and key)."""
        url, model = os.environ.get(ENV_URL), os.environ.get(ENV_MODEL)
        if not url:
            raise InvalidInputError(ENV_URL, "is not set", "export the server URL")
        if not model:
            raise InvalidInputError(ENV_MODEL, "is not set", "export the served model name")
        return cls(url, model, tokenizer, **kwargs)

    def __repr__(self) -> str:
        return (f"OpenAICompatBackend(url={self.url!r}, model={self.model!r}, "
                f"max_concurrency={self.max_concurrency})")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAICompatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Text and tokens (render_prompt, count_tokens, ...) come from LocalTokenizerMixin, so a
    # remote model sees exactly the prompts and budgets the local backend would build.

    # -- HTTP -------------------------------------------------------------------------------

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST with retries, all within ``timeout_s``; every failure becomes a BackendError
        without secrets."""
        where = f"{self.url}{path}"
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
            raise BackendError(
                f"{where} failed after {attempts} attempt(s): {exc.reason} "
                f"({time.monotonic() - began:.1f} s in all). Fix: check that the server is up "
                f"and not overloaded, or raise timeout_s / read_timeout_s / max_retries "
                f"({ENV_PREFIX}_TIMEOUT, _READ_TIMEOUT, _RETRIES)") from None

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
            raise _RetryableError(f"no time left of the {self.waits.timeout_s:g} s total")
        timeout = httpx.Timeout(min(self.waits.read_timeout_s, left),
                                connect=min(self.waits.connect_timeout_s, left))
        try:
            with self._client.stream("POST", path, json=body, timeout=timeout) as response:
                raw = self._read_body(response, where, deadline)
        except httpx.TimeoutException:
            raise _RetryableError("timed out") from None
        except httpx.TransportError as exc:
            raise _RetryableError(f"connection failed ({type(exc).__name__})") from None
        return self._parse(response, raw, where)

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
                raise _RetryableError(f"the answer did not complete within the "
                                 f"{self.waits.timeout_s:g} s total")
        return b"".join(chunks)

    def _parse(self, response: httpx.Response, raw: bytes, where: str) -> dict[str, Any]:
        """A success's JSON object, or the typed failure an error status means."""
        status = response.status_code
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

    def _map(self, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
        """Apply ``fn`` to every item with at most ``max_concurrency`` requests in flight."""
        if len(items) <= 1 or self.max_concurrency == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(items)),
                                thread_name_prefix="trustmargin-remote") as pool:
            return list(pool.map(fn, items))

    def _completion(self, body: Mapping[str, Any]) -> dict[str, Any]:
        # Like the local backend: a chat template already holds the special tokens, so the
        # server must not add a BOS of its own (vLLM honours this field; others ignore it).
        base = {"model": self.model, "add_special_tokens": not self._chat}
        return self._post("/v1/completions", {**base, **self.extra_body, **body})

    # -- generation -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations (``temperature=0``; no repetition penalty).

        The server decodes up to ``max_new_tokens`` tokens as before; ``stop`` is applied to
        the text it returns (:func:`~trustmargin_integrations.backends.base.cut_at_stop`: the
        text ends at the first character after which ``stop`` holds), so the answer a caller
        cleans is the one it was before, and the same as the local backend's.
        """
        def one(prompt: str) -> str:
            data = self._completion({
                "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0,
                "top_p": 1.0,
                # llama-cpp-python applies a 1.1 repetition penalty unless told otherwise,
                # which would make its "greedy" output differ from the local backend's.
                "repeat_penalty": 1.0,
            })
            return self._choice(data).get("text") or ""

        return [cut_at_stop(text, stop) for text in self._map(one, list(prompts))]

    def _choice(self, data: Mapping[str, Any]) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise BackendError(f"{self.url}/v1/completions answered without choices. Fix: use "
                               "a server that implements the OpenAI completions API")
        return choices[0]

    # -- scoring ----------------------------------------------------------------------------

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation from echoed prompt logprobs."""
        return self._map(self._score_one, list(requests))

    def _score_one(self, req: ContinuationRequest) -> ContinuationScore:
        n = self.count_tokens(req.continuation)
        if n == 0:
            return ContinuationScore(0.0, 0)
        data = self._completion({
            "prompt": req.prompt + req.continuation, "echo": True, "logprobs": 1,
            "max_tokens": 1, "temperature": 0.0,
        })
        return ContinuationScore(self.answer_logprob(data, req.continuation, n), n)

    def answer_logprob(self, data: Mapping[str, Any], answer: str, n: int) -> float:
        """Sum of the answer's ``n`` log-probabilities in an echoed completion response."""
        logprobs = self._choice(data).get("logprobs")
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(values, list) or not values:
            raise BackendError(
                f"{self.url} returned no prompt log-probabilities for an echo request. Fix: "
                "serve with prompt-logprob support (llama-cpp-python: logits_all=true; vLLM: "
                "--max-logprobs 1 or more); the llama.cpp C++ server does not echo them"
            )
        usage = data.get("usage")
        generated = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(generated, bool) or not isinstance(generated, int) or generated < 0:
            generated = 1
        end = len(values) - generated
        start = end - n
        if start < 1:
            raise BackendError(f"{self.url} echoed {len(values)} log-probabilities, too few for "
                               f"a {n}-token answer after its prompt. Fix: enable echo with "
                               "prompt logprobs on the server")
        tail = values[start:end]
        if any(v is None for v in tail):
            raise BackendError(f"{self.url} returned null log-probabilities for prompt tokens. "
                               "Fix: enable prompt logprobs on the server")
        for i, value in enumerate(tail, start):
            self._check_logprob(value, i, answer)
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
        if isinstance(tokens, list) and len(tokens) == len(values):
            seen = "".join(str(t) for t in tokens[start:end])
            if _fold(seen) != _fold(answer):
                raise BackendError(
                    f"the server's last {n} prompt tokens read {seen!r}, not the answer "
                    f"{answer!r}: the local tokenizer does not match the served model. Fix: "
                    "pass the tokenizer of the model the server runs"
                )
        return float(sum(float(v) for v in tail))

    def _check_logprob(self, value: Any, index: int, answer: str) -> None:
        """Refuse a token log-probability that is not a real number in (-inf, 0].

        A NaN would make every comparison with tau false, so it would silently become a
        Direct decision (and be cached as one); a positive or non-numeric value is as
        impossible. The error names the field of the answer and the request's answer.
        """
        problem = None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            problem = f"is a {type(value).__name__} ({str(value)[:40]!r}), not a number"
        elif math.isnan(value):
            problem = "is NaN"
        elif math.isinf(value):
            problem = f"is {value}"
        elif value > LOGPROB_TOLERANCE:
            problem = f"is {value!r}, above 0 (a log-probability is at most 0)"
        if problem is not None:
            shown = answer if len(answer) <= 60 else answer[:59] + "…"
            raise BackendError(
                f"{self.url}/v1/completions: choices[0].logprobs.token_logprobs[{index}] "
                f"{problem}, in the request scoring the answer {shown!r}; no decision was "
                "made from it. Fix: the server's numbers are broken (NaN and infinities "
                "usually mean a half-precision overflow or a damaged model file): serve the "
                "model in bfloat16 or float32, or fix the server, then run again")

    def check_tokenizer(self, probe: str = "TrustMargin checks: Goiás, 1,234 km².") -> bool:
        """True when the server's tokenize endpoint agrees with the local tokenizer on ``probe``.

        Tries llama-cpp-python's ``/extras/tokenize`` and vLLM's ``/tokenize``.
        """
        local = self.encode_answer(probe)
        for path, body in (("/extras/tokenize", {"input": probe}),
                           ("/tokenize", {"model": self.model, "prompt": probe,
                                          "add_special_tokens": False})):
            try:
                response = self._client.post(path, json=body)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                tokens = response.json().get("tokens")
                if isinstance(tokens, list):
                    return [int(t) for t in tokens] == local
        raise BackendError(f"{self.url} offers no tokenize endpoint to check against")

    # -- the arbiter's session --------------------------------------------------------------

    def session(self) -> AbstractContextManager[ModelSession]:
        """Generation and scoring straight through the server (nothing to share)."""
        return plain_session(self)
