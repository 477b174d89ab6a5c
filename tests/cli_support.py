"""The real ``trustmargin`` entry point run in-process, as a shell would run it: its typed
errors reach the user through :func:`trustmargin_integrations.cli.main` (one line, exit 2)."""

from __future__ import annotations

from dataclasses import dataclass

from typer.testing import CliRunner

from trustmargin_integrations.cli import main


@dataclass(frozen=True)
class Run:
    """What a user sees: the exit status and stdout and stderr together."""

    exit_code: int
    output: str


def run_main(*args: str) -> Run:
    """``trustmargin ARGS...`` through ``main``; an exception other than SystemExit (a
    traceback the user would see) propagates and fails the calling test."""
    with CliRunner().isolation() as (_, _, output):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
        text = output.getvalue().decode("utf-8", "replace")
    return Run(code, text)
