"""The one reader of JSON a user gave us (input files, corpora, datasets, policy files),
and the one rule for a user's file that is not UTF-8 (:func:`read_text`, :func:`not_utf8`).

Files are UTF-8 (a leading byte-order mark accepted); a ``.jsonl`` file is split on ``\\n``
only. A duplicate key, ``NaN`` / ``Infinity``, input nested too deeply or an integer too long
is an :class:`InvalidInputError` naming the record and the fix (why: docs/decisions.md).
Files the project writes itself are read by their owners.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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


BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte-order mark, accepted at the start of a file and dropped."""


def is_jsonl(path: Path) -> bool:
    """True for a JSON Lines file (``.jsonl``, ``.JSONL``, ...)."""
    return path.suffix.lower() == ".jsonl"


def _decode(data: bytes, where: str, *, whole_file: bool) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A whole file's error counts its line; one line's ``where`` already names it.
        raise not_utf8(where, exc, data if whole_file else None) from None


def read_text(path: str | Path, where: str | None = None) -> str:
    """A user's whole text file as UTF-8 (a leading byte-order mark dropped).

    Raises:
        InvalidInputError: on ``where`` (default: the path), the file is not UTF-8; the error
            names the byte and line and says to re-save it as UTF-8, never a traceback.
    """
    file = Path(path)
    return _decode(file.read_bytes().removeprefix(BOM), where or str(file), whole_file=True)


def lines(path: Path, name: str | None = None) -> Iterator[tuple[int, str]]:
    """``(number, line)`` of every non-blank line of a JSONL file, numbered from 1 and split
    on ``\n`` only, streamed (a huge file is never held whole).

    Raises:
        InvalidInputError: on ``NAME:LINE`` (``name`` defaults to the path), a line that is
            not UTF-8.
    """
    label = name or str(path)
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            text = _decode(raw.removeprefix(BOM) if number == 1 else raw, f"{label}:{number}",
                           whole_file=False)
            if text.strip():
                yield number, text


def load_document(path: Path, where: str, fix: str) -> Any:
    """Parse a whole JSON file strictly (see :func:`loads`)."""
    return loads(read_text(path, where), where, fix)
