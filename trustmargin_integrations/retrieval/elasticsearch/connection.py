"""How to reach Elasticsearch: settings and credentials, the client, and its failures.

Credentials are handed to the client and nowhere else: they are not in ``repr``, log lines or
error messages (every message from the client is scrubbed of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import SecretStr

from trustmargin_integrations.environment import EnvironmentGroup, secret_value, variables_named
from trustmargin_integrations.errors import BackendError, InvalidInputError
from trustmargin_integrations.urls import (
    check_header_secret,
    protect_basic_auth,
    protect_logs,
    redact_url,
    scrub,
    split_credentials,
)
from trustmargin_integrations.waits import Waits

ENV_URL = "TRUSTMARGIN_ES_URL"
ENV_API_KEY = "TRUSTMARGIN_ES_API_KEY"
ENV_USER = "TRUSTMARGIN_ES_USER"
ENV_PASSWORD = "TRUSTMARGIN_ES_PASSWORD"
ENV_CA_CERT = "TRUSTMARGIN_ES_CA_CERT"
ENV_INDEX = "TRUSTMARGIN_ES_INDEX"
DEFAULT_INDEX = "trustmargin"
ENV_PREFIX = "TRUSTMARGIN_ES"
"""Prefix of the wait settings (``TRUSTMARGIN_ES_TIMEOUT``, ``..._READ_TIMEOUT``,
``..._RETRIES``)."""
_VARIABLES = {"url": ENV_URL, "api_key": ENV_API_KEY, "username": ENV_USER,
              "password": ENV_PASSWORD, "ca_certs": ENV_CA_CERT}
"""The variable each :class:`ElasticsearchSettings` field falls back to."""


class ElasticsearchVariables(EnvironmentGroup):
    """The ``TRUSTMARGIN_ES_*`` variables as given (unset or empty: None)."""

    prefix = f"{ENV_PREFIX}_"

    url: str | None = None
    api_key: SecretStr | None = None
    user: str | None = None
    password: SecretStr | None = None
    ca_cert: str | None = None
    index: str | None = None


class ElasticsearchRetrievalError(BackendError):
    """The Elasticsearch server refused, failed or could not be reached."""


@dataclass(frozen=True)
class ElasticsearchSettings:
    """How to reach the server. Secrets are excluded from ``repr``.

    A ``user:password@`` part in ``url`` is moved into basic auth and removed from the URL.
    ``request_timeout`` (one attempt), ``max_retries`` and ``timeout_s`` (one request, all
    attempts) default to ``TRUSTMARGIN_ES_READ_TIMEOUT``, ``_RETRIES``, ``_TIMEOUT``, else
    60 s, 2 and 120 s; after construction they hold the values in force.
    """

    url: str
    api_key: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    request_timeout: float | None = None
    max_retries: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise InvalidInputError("url", "is empty",
                                    f"pass the Elasticsearch URL or set {ENV_URL}")
        # Credentials first: a password may hold a "/" that would otherwise end the host.
        clean, credentials = split_credentials(self.url.strip())
        parts = urlsplit(clean)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInputError("url", f"{self.safe_url!r} is not an http(s) URL",
                                    "use a URL such as http://localhost:9200")
        try:
            parts.port  # noqa: B018  (urlsplit checks the port only when asked)
        except ValueError:
            raise InvalidInputError("url", f"{self.safe_url!r} has a port that is not a "
                                    "number", "use a URL such as http://localhost:9200"
                                    ) from None
        if credentials is not None:
            if self.username or self.api_key:
                raise InvalidInputError("url", "holds credentials and other credentials were "
                                        "given too", "give credentials one way only")
            for secret in credentials:
                check_header_secret(secret, "url")  # the URL's user:password
            object.__setattr__(self, "username", credentials[0])
            object.__setattr__(self, "password", credentials[1])
            object.__setattr__(self, "url", redact_url(clean))
        # The client sends these in headers (basic auth as ASCII): checked here, where the
        # error can name them, instead of a UnicodeEncodeError inside the first request.
        for name in ("api_key", "username", "password"):
            if getattr(self, name) is not None:
                check_header_secret(getattr(self, name), name)
        protect_logs(self.secrets)
        protect_basic_auth(self.username or "", self.password or "")
        waits = Waits.resolve(ENV_PREFIX, {"read_timeout_s": self.request_timeout,
                                           "max_retries": self.max_retries,
                                           "timeout_s": self.timeout_s})
        object.__setattr__(self, "request_timeout", waits.read_timeout_s)
        object.__setattr__(self, "max_retries", waits.max_retries)
        object.__setattr__(self, "timeout_s", waits.timeout_s)
        if self.api_key and self.username:
            raise InvalidInputError("api_key", "is given together with basic auth (a user "
                                    "name and password)",
                                    "use either an API key or a user name and password")
        if self.username and not self.password:
            raise InvalidInputError("password", "is missing for basic auth",
                                    f"pass password= or set {ENV_PASSWORD}")
        if self.ca_certs and not Path(self.ca_certs).is_file():
            state = "is not a file" if Path(self.ca_certs).exists() else "does not exist"
            raise InvalidInputError("ca_certs", f"{self.ca_certs} {state}",
                                    "give the path of the server's CA certificate (PEM)")

    @property
    def safe_url(self) -> str:
        """The URL with any credentials and query string removed (safe to print)."""
        return redact_url(self.url)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every secret string, for scrubbing messages."""
        return tuple(s for s in (self.api_key, self.password) if s)

    @classmethod
    def from_env(cls, **overrides: Any) -> ElasticsearchSettings:
        """Settings from ``TRUSTMARGIN_ES_*`` variables; non-``None`` arguments win."""
        variables = ElasticsearchVariables.read()
        env = {
            "url": variables.url,
            "api_key": secret_value(variables.api_key),
            "username": variables.user,
            "password": secret_value(variables.password),
            "ca_certs": variables.ca_cert,
        }
        for key, variable in (("api_key", ENV_API_KEY), ("username", ENV_USER),
                              ("password", ENV_PASSWORD)):
            if env[key]:
                check_header_secret(env[key], variable)  # the error names the variable
        given = {k: v for k, v in overrides.items() if v is not None}
        if any(k in given for k in ("api_key", "username", "password")):
            # Credentials passed as arguments replace the environment's, never mix with them.
            for key in ("api_key", "username", "password"):
                env.pop(key)
        # Not a truthiness test: verify_certs=False and max_retries=0 are settings too.
        merged = {k: v for k, v in {**env, **given}.items() if v is not None and v != ""}
        if "url" not in merged:
            raise InvalidInputError("url", "is not set",
                                    f"pass the Elasticsearch URL or set {ENV_URL}")
        # A check on a value the environment gave names the variable. Credentials come from
        # one place, so a credential error (a password missing for TRUSTMARGIN_ES_USER) names
        # the variables when they are that place.
        from_env = {key for key in env if key not in given}
        with variables_named({key: variable for key, variable in _VARIABLES.items()
                              if key in from_env}):
            return cls(**merged)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``elasticsearch.Elasticsearch``."""
        assert self.request_timeout is not None and self.timeout_s is not None
        attempts = (self.max_retries or 0) + 1
        try:
            from trustmargin_integrations.retrieval.elasticsearch.node import DeadlineHttpNode
        except ImportError as exc:  # elasticsearch or httpx missing
            raise ElasticsearchRetrievalError(
                f"the Elasticsearch client cannot be used ({exc}). Fix: pip install "
                "'trustmargin-integrations[elasticsearch]'") from None

        kwargs: dict[str, Any] = {
            "hosts": [self.url],
            # The client retries at once, without pauses, so attempts x per-attempt limit
            # is the whole wait: lowering the limit keeps a dead server within timeout_s.
            # The node makes that limit a deadline for the whole attempt, headers and body
            # included (urllib3's bounds each read, which a trickling server never trips).
            "request_timeout": min(self.request_timeout, self.timeout_s / attempts),
            "node_class": DeadlineHttpNode,
            "max_retries": self.max_retries,
            "retry_on_timeout": True,
        }
        if self.api_key:
            kwargs["api_key"] = self.api_key
        if self.username:
            kwargs["basic_auth"] = (self.username, self.password or "")
        if self.ca_certs:
            kwargs["ca_certs"] = self.ca_certs
        if not self.verify_certs:
            kwargs["verify_certs"] = False
        return kwargs

    def scrub(self, text: str) -> str:
        """``text`` with URL credentials and every secret replaced by ``***``."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return scrub(text)


def connect(settings: ElasticsearchSettings) -> Any:
    """An ``elasticsearch.Elasticsearch`` client for ``settings`` (no request is made)."""
    try:
        from elasticsearch import Elasticsearch
    except ImportError as exc:
        raise ElasticsearchRetrievalError("the elasticsearch client is not installed. Fix: pip "
                                          "install 'trustmargin-integrations[elasticsearch]'"
                                          ) from exc
    return Elasticsearch(**settings.client_kwargs())




def scrubbed_detail(text: str, settings: ElasticsearchSettings | None) -> str:
    """At most 300 characters of a server's or client's text, with every secret removed."""
    # Scrub before cutting, so no part of a secret survives at the cut.
    text = text[:4000]
    return (settings.scrub(text) if settings else scrub(text))[:300]


def request_failed(action: str, exc: BaseException, settings: ElasticsearchSettings | None,
                   index: str) -> ElasticsearchRetrievalError:
    """The error to raise when ``action`` on ``index`` failed with the client's ``exc``: the
    HTTP status, the scrubbed detail and the fix that status calls for."""
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "meta", None),
                                                          "status", None)
    detail = scrubbed_detail(str(getattr(exc, "message", "") or exc), settings)
    where = settings.safe_url if settings else "Elasticsearch"
    if status and 300 <= status < 400:
        return ElasticsearchRetrievalError(
            f"{action} on {where} was answered with a redirect (HTTP {status}), not a result."
            " Fix: point the URL at the address the server redirects to (often https:// "
            "instead of http://)")
    hint = {401: "check the API key or user name and password",
            403: "give the credentials the index privileges they need",
            404: f"create the index first (index_corpus or `trustmargin index "
                 f"--elasticsearch URL`); index {index!r} does not exist"}.get(
        status or 0, "check that the server is up and reachable")
    code = f"HTTP {status}, " if status else ""
    return ElasticsearchRetrievalError(
        f"{action} on {where} failed ({code}{type(exc).__name__}: {detail}). Fix: {hint}")
