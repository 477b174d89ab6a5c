"""The one reader of JSON a user gave us (input files, corpora, datasets, calibration files),
and the one rule for a user's file that is not UTF-8 (:func:`read_text`, :func:`not_utf8`).

The standard parser accepts, without a word, things that silently change what a user meant:
a key written twice (the last one wins), ``NaN`` / ``Infinity`` (not JSON at all), and it
fails with untyped errors on input nested too deeply (``RecursionError``) or integers too long
to convert (``ValueError``). Here each of those is an :class:`InvalidInputError` that names
the record and says how to fix it. Files the project writes itself are read by their owners.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str | bytes, where: str, fix: str = "repair the file or write it again"
          ) -> Any:
    """Parse ``text`` strictly; every refusal is an :class:`InvalidInputError` on ``where``.

    Args:
        text: the JSON document (or one JSONL line).
        where: the field the error names, e.g. ``"data.jsonl:12"`` or ``"--calibration"``.
        fix: what to do about a document that is not valid JSON.
    """
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates,
                          parse_constant=_refuse_constant)
    except _DuplicateKeyError as exc:
        raise InvalidInputError(where, f"has the key {exc.key!r} twice in one object (the "
                                "standard parser would silently keep the last one)",
                                "keep one value per key") from None
    except json.JSONDecodeError as exc:
        raise InvalidInputError(where, f"is not valid JSON ({exc.msg} at line {exc.lineno}, "
                                f"column {exc.colno})", fix) from None
    except RecursionError:
        raise InvalidInputError(where, "is nested too deeply to read",
                                "flatten the data: a record needs only a few levels") from None
    except UnicodeDecodeError as exc:
        raise not_utf8(where, exc) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise InvalidInputError(where, "holds an integer too long to read",
                                    "write such a number as a string, or remove it") from None
        raise InvalidInputError(where, f"is not valid JSON ({exc})",
                                "write NaN or Infinity as null or a string") from None


def not_utf8(where: str, exc: UnicodeDecodeError, data: bytes | None = None
             ) -> InvalidInputError:
    """The error for a user's file (``where`` names it) that is not UTF-8 text: the byte
    and, when ``data`` holds the bytes read, the line, and the fix (re-save as UTF-8)."""
    place = f"byte {exc.start + 1}"
    if data is not None:
        line = data.count(b"\n", 0, exc.start) + 1
        place += f", line {line}"
    return InvalidInputError(where, f"is not UTF-8 text ({exc.reason} at {place}; Latin-1 "
                             "or Windows-1252 files look like this)",
                             "re-save the file as UTF-8 (in an editor: Save with Encoding, "
                             "UTF-8; or iconv -f latin1 -t utf-8)")


def read_text(path: str | Path, where: str | None = None) -> str:
    """A user's text file as UTF-8; one that is not is an :class:`InvalidInputError` naming
    ``where`` (default: the path) that says to re-save it as UTF-8, never a traceback."""
    file = Path(path)
    data = file.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(where or str(file), exc, data) from None
