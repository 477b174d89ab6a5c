"""The ``trustmargin`` typer app, its consoles, and :func:`main` (the console script)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import typer
from rich.console import Console

from trustmargin_integrations.cli.boundary import EXIT_INPUT, GuardedCommand, report
from trustmargin_integrations.errors import TrustMarginError

app = typer.Typer(
    name="trustmargin",
    help="TrustMargin: decide per question whether to trust the closed-book (Direct) answer "
         "or the retrieval-augmented (RAG) answer, from the frozen model's own likelihoods.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, files) gets a wide console so the decision tables stay readable.
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True)

Command = TypeVar("Command", bound=Callable[..., Any])


def command(name: str | None = None) -> Callable[[Command], Command]:
    """Register a sub-command inside the error boundary (every command goes through here)."""
    return app.command(name, cls=GuardedCommand)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: a typed error becomes one clear line and exit code 2.

    Args:
        argv: the arguments (default: the process's own).
    """
    try:
        app(args=list(argv) if argv is not None else None)
    except TrustMarginError as exc:
        report(exc, err_console)
        sys.exit(EXIT_INPUT)
