"""Where the OpenAI-compatible backend finds its server: URL, credentials, key and waits.

Every setting comes from a constructor argument or, when that is not given, from the
environment (``TRUSTMARGIN_REMOTE_*``). Settings are checked here, before anything is loaded
or sent, so a typo fails at once with the field it concerns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

from trustmargin_integrations.environment import EnvironmentGroup, secret_value
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.urls import check_header_secret, redact_url, split_credentials
from trustmargin_integrations.validation import check_count
from trustmargin_integrations.waits import Waits

ENV_URL = "TRUSTMARGIN_REMOTE_URL"
ENV_MODEL = "TRUSTMARGIN_REMOTE_MODEL"
ENV_API_KEY = "TRUSTMARGIN_REMOTE_API_KEY"
MAX_CONCURRENCY = 1024
"""The most requests one server may have in flight: each holds a connection and a thread."""
ENV_PREFIX = "TRUSTMARGIN_REMOTE"
"""Prefix of the wait settings: ``TRUSTMARGIN_REMOTE_TIMEOUT``, ``..._CONNECT_TIMEOUT``,
``..._READ_TIMEOUT``, ``..._RETRIES`` (see :mod:`trustmargin_integrations.waits`)."""


class RemoteVariables(EnvironmentGroup):
    """The ``TRUSTMARGIN_REMOTE_*`` server variables as given (unset or empty: None); the
    wait variables of the same prefix are :class:`~trustmargin_integrations.waits.Waits`'."""

    prefix = f"{ENV_PREFIX}_"

    url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None


@dataclass(frozen=True)
class ServerSettings:
    """How to reach and wait for one server, checked. Secrets are excluded from ``repr``.

    Attributes:
        root: the server root (``http://host:port``) without credentials.
        credentials: the ``user:password@`` part ``base_url`` held, if any.
        api_key: the bearer key (argument, else ``$TRUSTMARGIN_REMOTE_API_KEY``), if any.
        api_key_source: where the key came from (``api_key`` or the variable's name).
        waits: timeouts and retries.
        backoff_s: first retry delay in seconds.
    """

    root: str
    credentials: tuple[str, str] | None = field(repr=False)
    api_key: str | None = field(repr=False)
    api_key_source: str
    waits: Waits
    backoff_s: float

    @property
    def url(self) -> str:
        """The server root, safe to print."""
        return redact_url(self.root)


def resolve_settings(base_url: str, *, api_key: str | None, backoff_s: float,
                     waits: Mapping[str, Any]) -> ServerSettings:
    """Checked settings from the arguments (``waits``: the :class:`Waits` fields given, None
    entries falling back to the environment) and the environment."""
    resolved = Waits.resolve(ENV_PREFIX, waits)
    backoff = _check_backoff(backoff_s)
    # Credentials leave the URL for an auth object, so no log line or error can show them.
    root, credentials = _root_url(base_url)
    key = api_key if api_key is not None else secret_value(RemoteVariables.read().api_key)
    source = "api_key" if api_key is not None else ENV_API_KEY
    if key is not None:
        check_header_secret(key, source)
    return ServerSettings(root, credentials, key, source, resolved, backoff)


def check_concurrency(value: Any, field: str = "max_concurrency") -> int:
    """Requests in flight to one server: a whole number in 1..:data:`MAX_CONCURRENCY`."""
    return check_count(value, field, 1, MAX_CONCURRENCY, "allow from 1 request in flight "
                       f"up to {MAX_CONCURRENCY} (the default is 8)")


def _check_backoff(backoff_s: Any) -> float:
    if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or not (
            math.isfinite(backoff_s) and 0 <= backoff_s <= 30):
        raise InvalidInputError("backoff_s", f"must be from 0 to 30 seconds, got "
                                f"{backoff_s!r}", "pass a short first delay such as 0.5")
    return float(backoff_s)


def check_server_url(url: str, field: str) -> None:
    """Refuse a URL no server can be reached at, as the backend would (named ``field``),
    before anything is loaded."""
    try:
        _root_url(url)
    except InvalidInputError as exc:
        raise InvalidInputError(field, exc.problem, exc.fix) from None


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
                                "use a URL such as http://127.0.0.1:8000")
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when asked)
    except ValueError:
        raise InvalidInputError("base_url", f"{redact_url(url)!r} has a port that is not a "
                                "number", "use a URL such as http://127.0.0.1:8000") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", "")), credentials
