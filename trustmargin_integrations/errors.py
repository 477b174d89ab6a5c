"""Typed errors. Each one names the offending field and says how to fix it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only read (``exc.errors()``): this module imports nothing at run time
    from pydantic import ValidationError


VALUE_LIMIT = 200
"""The most characters of one user value an error message quotes (:func:`clip`)."""
MESSAGE_LIMIT = 2000
"""The most characters of a whole error line (:func:`clip_message`)."""


def clip(text: str, limit: int = VALUE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters with the count of what was cut, for quoting a
    user's value in a message: a 100,000-character model name is named by its head."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def clip_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """An error line cut to about ``limit`` characters, its ``Fix: ...`` kept whole when it
    fits: the head says what failed, the fix what to do."""
    if len(message) <= limit:
        return message
    head, sep, fix = message.rpartition(". Fix: ")
    if not sep or len(fix) > limit // 2:
        return clip(message, limit)
    return f"{clip(head, limit - len(fix))}. Fix: {fix}"


class TrustMarginError(Exception):
    """Base class for every error this package raises on purpose."""


class InvalidInputError(TrustMarginError, ValueError):
    """A user-supplied value is unusable.

    Attributes:
        field: the name of the offending argument or record key.
        fix: a short instruction that resolves the problem.
    """

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        super().__init__(f"{field}: {problem}. Fix: {fix}")


class ModelLoadError(TrustMarginError, OSError):
    """A model could not be found, verified or loaded."""


class CacheCorruptError(TrustMarginError):
    """A cached artifact failed its integrity check (it is rebuilt, never used)."""


class BackendError(TrustMarginError, RuntimeError):
    """A scoring or generation backend failed or lacks a required capability."""


class MissingExtraError(TrustMarginError, ImportError):
    """A feature needs packages of an install extra that is not installed.

    Attributes:
        extra: the extra that brings them (``pip install 'trustmargin-integrations[extra]'``).
        missing: the modules that could not be found.
    """

    def __init__(self, extra: str, missing: list[str], feature: str, alternative: str = "") -> None:
        self.extra = extra
        self.missing = list(missing)
        super().__init__(
            f"{feature} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
            f"not installed. Fix: pip install 'trustmargin-integrations[{extra}]'{alternative}")


class ServerUnavailableError(BackendError):
    """A model server could not be reached or did not answer in time, every retry and
    bounded wait spent (down, refusing connections, timing out, or answering 429/5xx
    throughout). A :class:`~trustmargin_integrations.backends.fleet.Fleet` sends such a
    server's requests to its other members; any other :class:`BackendError` (a refused
    request, an answer that fails its checks) is the request's or the server's fault and
    stops the call."""


class MixedFleetError(InvalidInputError):
    """The members of a serving fleet do not serve the same model (different model ids,
    tokenizers, context windows or numbers on the same probe), so which member answered
    would change the results."""


class UnscoredDecisionError(InvalidInputError):
    """A recorded Decision was made without scoring (its policy kept one side whatever the
    margins, so no margin was computed), and a replay asked for something the record
    cannot give: a margin policy, or a side whose answer was never produced."""


def invalid_input(exc: ValidationError, fix: str, prefix: str = "") -> InvalidInputError:
    """The first problem of a pydantic error as an InvalidInputError naming its field."""
    problem = exc.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    shown = repr(problem.get("input"))
    shown = shown if len(shown) <= 60 else shown[:59] + "…"
    return InvalidInputError(f"{prefix}{where}" if where else prefix.rstrip(".") or "value",
                             f"{problem['msg'][:1].lower()}{problem['msg'][1:]}, got {shown}",
                             fix)


def typed_error(exc: ValidationError, fix: str) -> InvalidInputError:
    """A pydantic error as the project's: the InvalidInputError a validator raised inside it
    (pydantic wraps it), else :func:`invalid_input` with ``fix``."""
    inner = (exc.errors()[0].get("ctx") or {}).get("error")
    return inner if isinstance(inner, InvalidInputError) else invalid_input(exc, fix)
