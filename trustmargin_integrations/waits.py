"""Bounded waits for remote servers: timeouts, retry counts and ``Retry-After``.

The one place that decides how long the project waits for a server (the OpenAI-compatible
model server and Elasticsearch). Each setting is a constructor argument or else the variable
``<PREFIX>_<NAME>`` (``PREFIX``: ``TRUSTMARGIN_REMOTE`` or ``TRUSTMARGIN_ES``; ``NAME``:
``CONNECT_TIMEOUT``, ``READ_TIMEOUT``, ``TIMEOUT``, ``RETRIES``). Defaults and why:
docs/scale_out.md, "Bounded waits", and docs/decisions.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from pydantic_settings import BaseSettings

from trustmargin_integrations.environment import ENVIRONMENT_CONFIG, read_environment
from trustmargin_integrations.errors import InvalidInputError

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 60.0
DEFAULT_TOTAL_TIMEOUT_S = 120.0
DEFAULT_RETRIES = 2

MAX_RETRY_AFTER_S = 30.0
"""The longest pause a server's ``Retry-After`` can ask for (longer asks are cut to it; the
total timeout still bounds the request)."""

MAX_TIMEOUT_S = 86_400.0
"""A day: any longer wait is a typo, not a deployment."""
MAX_RETRIES = 100

_FIELDS_BY_VARIABLE = {"connect_timeout": "connect_timeout_s",
                       "read_timeout": "read_timeout_s", "timeout": "timeout_s",
                       "retries": "max_retries"}


class WaitVariables(BaseSettings):
    """The wait variables ``<PREFIX>_CONNECT_TIMEOUT``, ``_READ_TIMEOUT``, ``_TIMEOUT`` and
    ``_RETRIES`` as given (unset: None); :meth:`Waits.resolve` checks their values."""

    model_config = ENVIRONMENT_CONFIG

    connect_timeout: float | None = None
    read_timeout: float | None = None
    timeout: float | None = None
    retries: int | None = None


def _seconds(value: Any, field: str) -> float:
    """A positive, finite number of seconds up to a day (bool and text refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(field, f"must be a number of seconds, got {value!r}",
                                "pass a positive number such as 30")
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise InvalidInputError(field, f"must be > 0 and at most {MAX_TIMEOUT_S:g} seconds, "
                                f"got {value!r}", "pass a positive number such as 30")
    return float(value)


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise InvalidInputError(field, f"must be an integer from 0 to {MAX_RETRIES}, got "
                                f"{value!r}", "pass 0 to disable retries, or a small count")
    return value


@dataclass(frozen=True)
class Waits:
    """How long to wait for one server request (see the module docstring for the defaults).

    Attributes:
        connect_timeout_s: connect timeout of one attempt.
        read_timeout_s: read timeout of one attempt (the longest silence while waiting).
        timeout_s: the bound on one request, all attempts and pauses included.
        max_retries: retries after a retryable failure (attempts = max_retries + 1).
    """

    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    timeout_s: float = DEFAULT_TOTAL_TIMEOUT_S
    max_retries: int = DEFAULT_RETRIES

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "read_timeout_s", "timeout_s"):
            object.__setattr__(self, name, _seconds(getattr(self, name), name))
        _count(self.max_retries, "max_retries")

    @classmethod
    def resolve(cls, prefix: str, given: Mapping[str, Any] | None = None) -> Waits:
        """Settings from ``given`` (None entries skipped), else ``<prefix>_<NAME>``, else the
        defaults. A malformed variable is an error naming the variable."""
        env = read_environment(WaitVariables, f"{prefix}_")
        values: dict[str, Any] = {}
        for name, key in _FIELDS_BY_VARIABLE.items():
            value = (given or {}).get(key)
            if value is not None:
                values[key] = value
            elif getattr(env, name) is not None:
                # Checked here, not by the constructor, so the error names the variable.
                variable = f"{prefix}_{name.upper()}"
                check = _count if key == "max_retries" else _seconds
                values[key] = check(getattr(env, name), variable)
        return cls(**values)

    @property
    def attempts(self) -> int:
        """Attempts per request: the first one and every retry."""
        return self.max_retries + 1


def retry_after_seconds(header: str | None, now: datetime | None = None) -> float | None:
    """The pause a ``Retry-After`` header asks for, in ``[0, MAX_RETRY_AFTER_S]``.

    Accepts delta-seconds and an HTTP date. None when the header is absent or unusable (NaN,
    infinity, garbage, an impossible date): the caller's own backoff applies. A negative
    value or a date in the past means "now" (0), never a negative sleep; a huge one is cut
    to the cap.
    """
    if header is None or not header.strip():
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
