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

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

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

logger = logging.getLogger(__name__)

ENV_URL = "TRUSTMARGIN_REMOTE_URL"
ENV_MODEL = "TRUSTMARGIN_REMOTE_MODEL"
ENV_API_KEY = "TRUSTMARGIN_REMOTE_API_KEY"

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# Phrases servers use when the model cannot return prompt log-probabilities. Such a server
# will never succeed, so the request fails at once instead of being retried.
_NO_LOGPROBS_HINTS = ("logits_all", "logprobs is not supported", "prompt_logprobs",
                      "logprobs are not supported", "does not support logprobs")

_T = TypeVar("_T")
_R = TypeVar("_R")


def _root_url(url: str) -> str:
    """The server root: accepts ``http://host:port`` or ``http://host:port/v1``."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInputError("base_url", "is empty",
                                f"pass the server URL, e.g. http://127.0.0.1:8000, or set "
                                f"{ENV_URL}")
    parts = urlsplit(url.strip())
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
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


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
        max_concurrency: requests in flight at once.
        timeout_s: per-request timeout in seconds (a request queued behind others on a
            one-at-a-time server such as llama-cpp-python waits for them too).
        max_retries: retries after a 429/5xx answer, a timeout or a dropped connection.
        backoff_s: first retry delay; doubled per retry, with jitter, capped at 30 s.
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
        timeout_s: float = 300.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
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
        if max_retries < 0:
            raise InvalidInputError("max_retries", f"must be >= 0, got {max_retries}",
                                    "use 0 to disable retries")
        # Credentials leave the URL for an auth object, so no log line or error can show them.
        self._root, credentials = split_credentials(_root_url(base_url))
        self.url = redact_url(self._root)
        self.model = model
        self.model_id = model_id or model
        self.tokenizer = load_tokenizer(tokenizer)
        limit = getattr(self.tokenizer, "model_max_length", None)
        # Tokenizers without a limit report a huge sentinel (int(1e30)).
        self.context_window = context_window or (
            limit if isinstance(limit, int) and limit < 10_000_000 else None)
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.extra_body = dict(extra_body or {})
        self._renderer = renderer
        self._chat = self.has_chat_template
        key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        protect_logs([key] if key else [])
        self._client = httpx.Client(
            base_url=self._root, headers=headers, timeout=timeout_s, transport=transport,
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
        """POST with bounded retries; every failure becomes a BackendError without secrets."""
        where = f"{self.url}{path}"
        reason = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            with self._lock:
                self.requests_sent += 1
            try:
                response = self._client.post(path, json=body)
            except httpx.TimeoutException:
                reason = "timed out"
            except httpx.TransportError as exc:
                reason = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if status < 400:
                    try:
                        data = response.json()
                    except ValueError:
                        raise BackendError(f"{where} answered HTTP {status} with a body that is "
                                           "not JSON. Fix: point base_url at an "
                                           "OpenAI-compatible server") from None
                    if not isinstance(data, dict):
                        raise BackendError(f"{where} answered with JSON that is not an object")
                    return data
                # Servers may quote the request, credentials included: scrub before showing.
                detail = scrub(response.text[:300].replace("\n", " "))
                if any(hint in detail.lower() for hint in _NO_LOGPROBS_HINTS):
                    raise BackendError(
                        f"{where} cannot return prompt log-probabilities (HTTP {status}: "
                        f"{detail}). Fix: llama-cpp-python needs logits_all=true; vLLM needs "
                        "--max-logprobs >= 1 and a version with prompt logprobs"
                    )
                if status not in RETRY_STATUS:
                    raise BackendError(f"{where} answered HTTP {status}: {detail}")
                reason = f"HTTP {status}"
                header = response.headers.get("retry-after")
                if header is not None:
                    try:
                        retry_after = min(float(header), 30.0)
                    except ValueError:
                        retry_after = None
            if attempt == self.max_retries:
                break
            delay = retry_after if retry_after is not None else min(
                30.0, self.backoff_s * 2**attempt * (1.0 + random.random() / 2))
            with self._lock:
                self.retries += 1
            logger.info("retrying %s after %s (attempt %d of %d, waiting %.1f s)", where,
                        reason, attempt + 1, self.max_retries, delay)
            time.sleep(delay)
        raise BackendError(f"{where} failed after {self.max_retries + 1} attempt(s): {reason}. "
                           "Fix: check that the server is up and not overloaded, or raise "
                           "timeout_s / max_retries")

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
        if not isinstance(generated, int) or generated < 0:
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
