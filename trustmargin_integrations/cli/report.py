"""``trustmargin report``: the Markdown report of a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import shown
from trustmargin_integrations.cli.common import calibration_path, check_run_dir


@command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `trustmargin eval`.")],
    out: Annotated[Path | None, typer.Option(help="Report file (default RUN_DIR/report.md).")
                   ] = None,
    title: Annotated[str | None, typer.Option(help="Report heading.")] = None,
    calibration: Annotated[str | None, typer.Option(
        help="Also report this policy file (or 'shipped') on the run's questions "
             "outside its fit.")] = None,
) -> None:
    """Write the Markdown report (tables, diagnostics, PNG plots) of a run directory."""
    from trustmargin_integrations.evaluation.report.build import build_report, report_files
    from trustmargin_integrations.output_guard import guard_output

    # The report and its summary (the figures beside them go through the writer's checks).
    for path in report_files(run_dir, out):
        guard_output(path, "--out", inputs={"--calibration": calibration_path(calibration)},
                     run_dir=run_dir)
    check_run_dir(run_dir)
    path = build_report(run_dir, out, title=title, calibration=calibration)
    typer.echo(f"report: {shown(str(path))}")
