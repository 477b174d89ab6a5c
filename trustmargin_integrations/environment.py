"""Settings read from environment variables, through pydantic-settings.

Every group of variables the project reads (``TRUSTMARGIN_REMOTE_*`` for the model server,
``TRUSTMARGIN_ES_*`` for Elasticsearch, the wait settings of both) is a ``BaseSettings``
model next to the code that uses it; :func:`read_environment` is the one place that reads
such a model and turns a malformed variable into an :class:`InvalidInputError` naming the
variable, as every other input error names its field. Secrets are ``SecretStr``: they never
reach a ``repr`` or a log line by accident.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from trustmargin_integrations.errors import InvalidInputError

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

ENVIRONMENT_CONFIG = SettingsConfigDict(
    # An empty variable means "not set" (shell scripts often export NAME= to clear one).
    env_ignore_empty=True,
    # Other variables sharing the prefix belong to someone else's tools: not an error.
    extra="ignore",
    # No .env file and no secrets directory: what the process environment says is all.
    env_file=None,
    frozen=True,
)
"""The configuration every environment model of the project uses (``model_config``)."""

_TYPE_WORDS = {"float_parsing": "not a number", "int_parsing": "not a whole number",
               "int_from_float": "not a whole number", "bool_parsing": "not true or false"}


def read_environment(model: type[SettingsT], prefix: str) -> SettingsT:
    """The variables ``<prefix><FIELD>`` of ``model`` (``prefix`` ends with ``_``), parsed.

    Raises:
        InvalidInputError: a variable that does not parse, named (``TRUSTMARGIN_ES_RETRIES``).
    """
    _refuse_digit_separators(model, prefix)
    try:
        return model(_env_prefix=prefix)
    except ValidationError as exc:
        error = exc.errors()[0]
        variable = f"{prefix}{str(error['loc'][0]).upper()}"
        problem = _TYPE_WORDS.get(error["type"], error["msg"])
        raise InvalidInputError(variable, f"is {error.get('input')!r}, {problem}",
                                "set it to a valid value (see the docs), or unset it"
                                ) from None


def _is_number(annotation: Any) -> bool:
    """True for a field typed int or float (also ``float | None``), bool excluded."""
    return annotation in (int, float) or any(
        arg in (int, float) for arg in typing.get_args(annotation))


def _refuse_digit_separators(model: type[BaseSettings], prefix: str) -> None:
    """Refuse a number written with ``_`` (``1_0``): Python's and pydantic's parsers read it
    as 10, which a person who typed ``1_0`` (or a script that pasted two values) did not
    mean; no tool the variables come from writes numbers that way."""
    given = {name.upper(): value for name, value in os.environ.items()}  # case-insensitive
    for field, info in model.model_fields.items():
        variable = f"{prefix}{field}".upper()
        raw = given.get(variable)
        if raw and "_" in raw and _is_number(info.annotation):
            raise InvalidInputError(variable, f"is {raw!r}, not a number ('_' is not "
                                    "accepted between digits)",
                                    "write the number without '_', or unset it")


@contextmanager
def variables_named(variables: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, an :class:`InvalidInputError` about a field whose value came from an
    environment variable names that variable (``variables``: field -> variable name).

    The checks (an http(s) URL, an existing CA file...) live with the settings they check and
    name the Python field, as an argument would be named; a user who set
    ``TRUSTMARGIN_ES_URL`` never typed ``url``, so the caller that read the environment lists
    which fields it filled from it, and the error is renamed here, in one place.
    """
    try:
        yield
    except InvalidInputError as exc:
        variable = variables.get(exc.field)
        if variable is None:
            raise
        fix = exc.fix if variable in exc.fix else f"{exc.fix} (in {variable})"
        raise InvalidInputError(variable, exc.problem, fix) from None


def secret_value(secret: SecretStr | None) -> str | None:
    """The plain text of a secret read from the environment (None when it was not set), for
    the one client call that needs it."""
    return None if secret is None else secret.get_secret_value()


class EnvironmentGroup(BaseSettings):
    """A group of variables with one fixed prefix (``TRUSTMARGIN_ES_``), read by :meth:`read`.
    Subclasses declare the fields and set ``prefix``."""

    model_config = ENVIRONMENT_CONFIG
    prefix: ClassVar[str] = ""

    @classmethod
    def read(cls: type[GroupT]) -> GroupT:
        """The group's variables now in the environment."""
        return read_environment(cls, cls.prefix)


GroupT = TypeVar("GroupT", bound=EnvironmentGroup)
