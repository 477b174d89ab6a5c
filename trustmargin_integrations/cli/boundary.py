"""The CLI's one error boundary.

Every command runs as a :class:`GuardedCommand`: the common environment failures (a full or
read-only disk, a path that is a folder or a file where the other was expected, a file that
is not UTF-8, JSON nested too deep to read or with an integer too long to convert) become an
:class:`~trustmargin_integrations.errors.InvalidInputError` naming the option that gave the
file and a fix. :func:`report` then prints any of our typed errors as one line (exit code 2).
Anything else is a defect and keeps its traceback.
"""

from __future__ import annotations

import codecs
import errno
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument, TyperCommand, TyperOption

from trustmargin_integrations.errors import (
    InvalidInputError,
    TrustMarginError,
    clip,
    clip_message,
)
from trustmargin_integrations.validation import strip_controls

EXIT_INPUT = 2

# errno -> (what happened, how to fix it), for failures on a path the user named.
_OS_FIXES: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("the disk is full", "free some space or write to another disk"),
    errno.EDQUOT: ("the disk quota is exhausted", "free some space or write elsewhere"),
    errno.EROFS: ("the file system is read-only", "choose a writable location"),
    errno.EACCES: ("permission denied", "choose a location you may use, or fix its "
                   "permissions"),
    errno.EPERM: ("operation not permitted", "choose a location you may use, or fix its "
                  "permissions"),
    errno.EISDIR: ("is a directory", "pass a file path, not a folder"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder",
                    "pass a path whose parent folders are folders"),
    errno.EEXIST: ("already exists", "remove it or choose another path"),
    errno.ENOENT: ("does not exist", "check the path"),
    errno.ENAMETOOLONG: ("the name is too long", "choose a shorter path"),
}


class GuardedCommand(TyperCommand):
    """A command whose environment failures are typed errors that name the option, and whose
    number options refuse ``_`` between digits."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        """Parse as usual, then refuse a number option written with ``_``: Python's parsers
        read ``1_0`` as 10, which a person who typed it did not mean."""
        given = list(args)
        try:
            rest = super().parse_args(ctx, args)
        except typer.BadParameter as exc:
            # click's own box (a range, a type, a missing value) would be the one refusal
            # not in the one-line format of every other; the same facts, typed.
            name = _option_name(exc.param) if isinstance(exc.param, TyperOption | TyperArgument) \
                else (exc.param_hint if isinstance(exc.param_hint, str) else "option")
            raise InvalidInputError(name, clip(exc.message or "is not valid"),
                                    "pass a value the option accepts (see --help)") from None
        for param in self.params:
            value = ctx.params.get(param.name or "")
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            for text in _option_values(given, param.opts):
                if "_" in text:
                    raise InvalidInputError(_option_name(param), f"{text!r} is not a number "
                                            "('_' is not accepted between digits)",
                                            "write the number without '_'")
        return rest

    def invoke(self, ctx: typer.Context) -> Any:
        """Run the command; translate the failures listed in the module docstring."""
        try:
            return super().invoke(ctx)
        except InvalidInputError as exc:
            raise named_by_option(exc, list(given_paths(ctx))) from exc.__cause__
        except TrustMarginError:
            raise
        except (OSError, ValueError, RecursionError) as exc:
            typed = environment_error(exc, list(given_paths(ctx)))
            if typed is None:
                raise
            raise typed from exc


def named_by_option(exc: InvalidInputError, paths: list[tuple[str, Path]]
                    ) -> InvalidInputError:
    """A library error about a file the user gave, named by the option that gave it too.

    The library names what it read (``data.jsonl:12``, a corpus path, ``calibration``); the
    user typed an option. A field that starts with a given path gains the option in front
    (``--input data.jsonl:12``), a field that is an option's bare name becomes the option
    (``calibration`` -> ``--calibration``), and a field inside what it names keeps its place
    after the option (``calibration.policy.tau`` -> ``--calibration policy.tau``). Any other
    error is returned as it is.
    """
    for option, path in paths:
        bare = option.lstrip("-")
        if _names_place_in(exc.field, path):
            return InvalidInputError(f"{option} {exc.field}", exc.problem, exc.fix)
        if exc.field == bare:
            return InvalidInputError(option, exc.problem, exc.fix)
        if exc.field.startswith(bare + "."):
            return InvalidInputError(f"{option} {exc.field.removeprefix(bare + '.')}",
                                     exc.problem, exc.fix)
    return exc


def _names_place_in(field: str, path: Path) -> bool:
    """True when ``field`` is the existing file ``path`` or a place in it (``path:12``,
    ``path[3]``, ``path.examples[0]``)."""
    name = str(path)
    return (field.startswith(name) and path.exists()
            and (len(field) == len(name) or field[len(name)] in ":[."))


def plain(text: str) -> str:
    """``text`` safe for the terminal: control characters removed, so an escape sequence in
    a corpus title or a model's answer cannot clear the screen or set the clipboard."""
    return strip_controls(text)[0]


def printable(text: str) -> str:
    """:func:`plain` text with rich markup escaped, for ``console.print``."""
    return escape(plain(text))


# Every control character (newline and tab too) and the Unicode line separators.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: str) -> str:
    """``text`` on one line and safe for the terminal, for a path or an error line: each
    control character or line separator is written as its escape (``\\n``, ``\\x1b``),
    so a folder named with a newline prints as one line that names it exactly, and an
    escape sequence never reaches the terminal."""
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"),
                            text)


def shown_markup(text: str) -> str:
    """:func:`shown` text with rich markup escaped, for ``console.print``."""
    return escape(shown(text))


def report(exc: TrustMarginError, console: Console) -> None:
    """Print a typed error as one line (it quotes user text: escaped, never wrapped).

    Printing is linear in the message: rich's highlighter is off (quadratic on long lines:
    docs/decisions.md), and a message longer than
    :data:`~trustmargin_integrations.errors.MESSAGE_LIMIT` keeps its head and its ``Fix:``
    (:func:`~trustmargin_integrations.errors.clip`)."""
    console.print(f"[red]error[/] {shown_markup(clip_message(str(exc)))}", soft_wrap=True,
                  highlight=False)


def given_paths(ctx: typer.Context) -> Iterator[tuple[str, Path]]:
    """(option as the user typed it, path) for every path-like value the command got."""
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        values = value if isinstance(value, list | tuple) else [value]
        for item in values:
            if isinstance(item, str | Path) and item and item != "shipped":
                yield _option_name(param), Path(item)


def _option_values(args: list[str], opts: list[str]) -> Iterator[str]:
    """The values ``args`` give the option named ``opts`` (``--k 3``, ``--k=3``, ``-k3``)."""
    for i, token in enumerate(args):
        if token == "--":
            return
        for opt in opts:
            if token == opt and i + 1 < len(args):
                yield args[i + 1]
            elif token.startswith(opt + "="):
                yield token[len(opt) + 1:]
            elif len(opt) == 2 and not opt.startswith("--") and token.startswith(opt) \
                    and len(token) > 2:
                yield token[2:]


def _option_name(param: TyperOption | TyperArgument) -> str:
    if isinstance(param, TyperOption):
        return max(param.opts, key=len)
    return (param.name or "argument").upper()


def environment_error(exc: BaseException, paths: list[tuple[str, Path]]
                      ) -> InvalidInputError | None:
    """The typed error for one environment failure, or None when it is none of them."""
    if isinstance(exc, OSError):
        return _os_error(exc, paths) if exc.filename else None
    if isinstance(exc, UnicodeDecodeError):
        field, where = _not_utf8(paths)
        return InvalidInputError(field, f"{where} is not UTF-8 text ({exc.reason})",
                                 "save the file as UTF-8")
    if isinstance(exc, RecursionError):
        field, where = _suspects(paths)
        return InvalidInputError(field, f"{where} is nested too deeply to read",
                                 "flatten the data: a record needs only a few levels")
    if isinstance(exc, json.JSONDecodeError):
        field, where = _suspects(paths)
        return InvalidInputError(field, f"{where} is not valid JSON ({exc.msg} at line "
                                 f"{exc.lineno}, column {exc.colno})",
                                 "repair the file or write it again")
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        field, where = _suspects(paths)
        return InvalidInputError(field, f"{where} holds an integer too long to read",
                                 "write such a number as a string, or remove it")
    return None


def _os_error(exc: OSError, paths: list[tuple[str, Path]]) -> InvalidInputError:
    failed = Path(exc.filename)
    problem, fix = _OS_FIXES.get(exc.errno or -1, (exc.strerror or str(exc), "check the path"))
    return InvalidInputError(_owner(failed, paths), f"{failed}: {problem.lower()}", fix)


def _owner(failed: Path, paths: list[tuple[str, Path]]) -> str:
    """The option whose path is the failed one, holds it, lies in it (a folder that could not
    be made), or is its stem (``OUT.cache``)."""
    best: tuple[int, str] | None = None
    for option, path in paths:
        holds = (path == failed or path in failed.parents or failed in path.parents
                 or str(failed).startswith(str(path)))
        if holds and (best is None or len(str(path)) > best[0]):
            best = (len(str(path)), option)
    return best[1] if best else str(failed)


def _suspects(paths: list[tuple[str, Path]]) -> tuple[str, str]:
    """The options that gave a file or folder (what one of them holds failed to read)."""
    given = [(o, p) for o, p in paths if p.exists()]
    if not given:
        return "input", "an input file"
    field = "/".join(dict.fromkeys(o for o, _ in given))
    where = " or ".join(f"{p}" if p.is_file() else f"a file in {p}" for _, p in given)
    return field, where


def _not_utf8(paths: list[tuple[str, Path]]) -> tuple[str, str]:
    """The option whose file does not decode as UTF-8 (every suspect when none is a file)."""
    for option, path in paths:
        if path.is_file() and not _decodes(path):
            return option, str(path)
    return _suspects(paths)


def _decodes(path: Path, chunk: int = 1 << 20) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with path.open("rb") as handle:
            while block := handle.read(chunk):
                decoder.decode(block)
            decoder.decode(b"", final=True)
    except (UnicodeDecodeError, OSError):
        return False
    return True
