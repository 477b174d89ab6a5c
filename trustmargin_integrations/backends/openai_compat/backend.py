"""The Backend protocol over an OpenAI-compatible ``/v1/completions`` server.

Generation is a greedy completion; a likelihood is the sum over the answer's tokens of the
prompt log-probabilities the server echoes (:mod:`.logprobs`), divided by the answer's token
count, as in the local backend. Requests go through :mod:`.transport`; settings are checked
by :mod:`.settings`. Tokenization is local (see the package docstring for why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import httpx

from trustmargin_integrations.backends.base import (
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    StopPredicate,
    cut_at_stop,
    plain_session,
)
from trustmargin_integrations.backends.openai_compat.logprobs import (
    EchoRequest,
    completion_text,
    echoed_answer_logprob,
)
from trustmargin_integrations.backends.openai_compat.settings import (
    ENV_MODEL,
    ENV_URL,
    RemoteVariables,
    check_concurrency,
    resolve_settings,
)
from trustmargin_integrations.backends.openai_compat.tokenizer import served_tokenizer
from trustmargin_integrations.backends.openai_compat.transport import CompletionsTransport
from trustmargin_integrations.backends.tokens import LocalTokenizerMixin
from trustmargin_integrations.environment import variables_named
from trustmargin_integrations.errors import BackendError, InvalidInputError

_T = TypeVar("_T")
_R = TypeVar("_R")


def load_tokenizer(source: Any) -> Any:
    """The served model's tokenizer from a named model, a ``.gguf`` file, a folder holding
    ``tokenizer.json`` or a Hugging Face hub id, without transformers (:mod:`.tokenizer`).

    A tokenizer object (anything with ``apply_chat_template``, e.g. a transformers one) is
    returned unchanged.
    """
    if hasattr(source, "apply_chat_template"):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidInputError("tokenizer", f"is a {type(source).__name__}",
                                "pass a tokenizer, a named model such as 'smollm2-135m', a "
                                "model directory or a .gguf file")
    return served_tokenizer(source)


class OpenAICompatBackend(LocalTokenizerMixin):
    """The Backend protocol over an OpenAI-compatible completions server.

    Args:
        base_url: server root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted).
        model: the model name the server serves (the ``model`` field of each request).
        tokenizer: the served model's tokenizer: an object (e.g. a transformers tokenizer),
            or a named model, a ``.gguf`` file, a folder with ``tokenizer.json`` or a hub id,
            read without transformers (:mod:`.tokenizer`).
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
                                    "give the served model name: GET /v1/models lists it")
        check_concurrency(max_concurrency, "max_concurrency")
        settings = resolve_settings(base_url, api_key=api_key, backoff_s=backoff_s, waits={
            "timeout_s": timeout_s, "connect_timeout_s": connect_timeout_s,
            "read_timeout_s": read_timeout_s, "max_retries": max_retries})
        self.waits = settings.waits
        self.url = settings.url
        self.model = model
        self.model_id = model_id or model
        self.tokenizer = load_tokenizer(tokenizer)
        limit = getattr(self.tokenizer, "model_max_length", None)
        # Tokenizers without a limit report a huge sentinel (int(1e30)).
        self.context_window = context_window or (
            limit if isinstance(limit, int) and limit < 10_000_000 else None)
        self.max_concurrency = max_concurrency
        self.max_retries = self.waits.max_retries
        self.backoff_s = settings.backoff_s
        self.extra_body = dict(extra_body or {})
        self._renderer = renderer
        self._chat = self.has_chat_template
        self._http = CompletionsTransport(settings, max_concurrency=max_concurrency,
                                          transport=transport)

    @property
    def capabilities(self) -> Capabilities:
        """A server: its served model name; its dtype and threads are not known here."""
        return Capabilities(kind="openai", model=self.model)

    @property
    def requests_sent(self) -> int:
        """HTTP attempts made so far, retries included."""
        return self._http.requests_sent

    @property
    def retries(self) -> int:
        """Retries made so far (attempts after a retryable failure)."""
        return self._http.retries

    @classmethod
    def from_env(cls, tokenizer: Any, **kwargs: Any) -> OpenAICompatBackend:
        """Build from ``$TRUSTMARGIN_REMOTE_URL``, ``$TRUSTMARGIN_REMOTE_MODEL`` (and key)."""
        variables = RemoteVariables.read()
        url, model = variables.url, variables.model
        if not url:
            raise InvalidInputError(ENV_URL, "is not set", "export the server URL")
        if not model:
            raise InvalidInputError(ENV_MODEL, "is not set", "export the served model name")
        with variables_named({"base_url": ENV_URL, "model": ENV_MODEL}):
            return cls(url, model, tokenizer, **kwargs)

    def __repr__(self) -> str:
        return (f"OpenAICompatBackend(url={self.url!r}, model={self.model!r}, "
                f"max_concurrency={self.max_concurrency})")

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._http.close()

    def __enter__(self) -> OpenAICompatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Text and tokens (render_prompt, count_tokens, ...) come from LocalTokenizerMixin, so a
    # remote model sees exactly the prompts and budgets the local backend would build.

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
        # The request's work, which paces what is in flight on the server (transport.py):
        # the prompt's tokens and those it may generate.
        units = self.count_tokens(body["prompt"]) + int(body.get("max_tokens", 0))
        return self._http.post("/v1/completions", {**base, **self.extra_body, **body}, units)

    # -- generation -------------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations (``temperature=0``; no repetition penalty).

        The server decodes up to ``max_new_tokens`` tokens; ``stop`` is applied to the text
        it returns (:func:`~trustmargin_integrations.backends.base.cut_at_stop`: the text
        ends at the first character after which ``stop`` holds), so the answer a caller
        cleans is the same as the local backend's.
        """
        def one(prompt: str) -> str:
            data = self._completion({
                "prompt": prompt, "max_tokens": max_new_tokens, "temperature": 0.0,
                "top_p": 1.0,
                # llama-cpp-python applies a 1.1 repetition penalty unless told otherwise,
                # which would make its "greedy" output differ from the local backend's.
                "repeat_penalty": 1.0,
            })
            return completion_text(data, self.url)

        return [cut_at_stop(text, stop) for text in self._map(one, list(prompts))]

    # -- scoring ----------------------------------------------------------------------------

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation from echoed prompt logprobs."""
        return self._map(self._score_one, list(requests))

    def _score_one(self, req: ContinuationRequest) -> ContinuationScore:
        ids = self.encode_answer(req.continuation)
        if not ids:
            return ContinuationScore(0.0, 0)
        data = self._completion({
            "prompt": req.prompt + req.continuation, "echo": True, "logprobs": 1,
            "max_tokens": 1, "temperature": 0.0,
        })
        return ContinuationScore(echoed_answer_logprob(data, self._echo_request(req, ids),
                                                       self.url), len(ids))

    def _echo_request(self, req: ContinuationRequest, ids: Sequence[int]) -> EchoRequest:
        """What the checks of an echo need: the sent text, counted as the server counts it
        (special tokens as in :meth:`_completion`), and the answer's tokens as texts."""
        sent = req.prompt + req.continuation
        counted = self.tokenizer(sent, add_special_tokens=not self._chat).input_ids
        pieces = tuple(self.tokenizer.decode([i]) for i in ids)
        return EchoRequest(sent, req.continuation, pieces, len(counted))

    def answer_logprob(self, data: Mapping[str, Any], request: ContinuationRequest) -> float:
        """Sum of ``request``'s answer log-probabilities in the echoed completion response
        ``data`` to it, every alignment check done (:mod:`.logprobs`)."""
        ids = self.encode_answer(request.continuation)
        return echoed_answer_logprob(data, self._echo_request(request, ids), self.url)

    def check_tokenizer(self, probe: str = "TrustMargin checks: Goiás, 1,234 km².") -> bool:
        """True when the server's tokenize endpoint agrees with the local tokenizer on ``probe``.

        Tries llama-cpp-python's ``/extras/tokenize`` and vLLM's ``/tokenize``.
        """
        local = self.encode_answer(probe)
        for path, body in (("/extras/tokenize", {"input": probe}),
                           ("/tokenize", {"model": self.model, "prompt": probe,
                                          "add_special_tokens": False})):
            response = self._http.try_post(path, body)
            if response is None or response.status_code != 200:
                continue
            try:
                answer = response.json()
            except ValueError:  # not JSON: not this server's tokenize endpoint
                continue
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            if isinstance(tokens, list) and all(
                    isinstance(t, int) and not isinstance(t, bool) for t in tokens):
                return tokens == local
        raise BackendError(f"{self.url} offers no tokenize endpoint to check against")

    # -- the arbiter's session --------------------------------------------------------------

    def session(self) -> AbstractContextManager[ModelSession]:
        """Generation and scoring straight through the server (nothing to share)."""
        return plain_session(self)
