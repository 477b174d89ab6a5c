"""``trustmargin report``: the Markdown report of a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import plain
from trustmargin_integrations.cli.common import check_run_dir
from trustmargin_integrations.errors import InvalidInputError


@command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `trustmargin eval`.")],
    out: Annotated[Path | None, typer.Option(help="Report file (default RUN_DIR/report.md).")
                   ] = None,
    title: Annotated[str | None, typer.Option(help="Report heading.")] = None,
    calibration: Annotated[str | None, typer.Option(
        help="Also report this calibration file (or 'shipped') on the run's questions "
             "outside its fit.")] = None,
) -> None:
    """Write the Markdown report (tables, diagnostics, PNG plots) of a run directory."""
    from trustmargin_integrations.evaluation.report import build_report

    check_run_dir(run_dir)
    if out is not None and out.is_dir():
        raise InvalidInputError("--out", f"{out} is a directory",
                                "pass a file path, e.g. --out DIR/report.md")
    path = build_report(run_dir, out, title=title, calibration=calibration)
    typer.echo(f"report: {plain(str(path))}")
