"""``trustmargin calibrate``: fit lambda_bind and tau on a run's cached decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import plain
from trustmargin_integrations.cli.common import check_run_dir
from trustmargin_integrations.errors import InvalidInputError


@command()
def calibrate(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `trustmargin eval`.")],
    out: Annotated[Path | None, typer.Option(
        help="Calibration file to write (default RUN_DIR/calibration.json).")] = None,
    objective: Annotated[str, typer.Option(help="Mean to maximize: f1 or em.")] = "f1",
    folds: Annotated[int, typer.Option(
        help="Cross-validation folds, stratified by dataset (0 = skip the estimate).")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the fold shuffle and the bootstrap.")] = 0,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples.")] = 10_000,
    holdout: Annotated[float, typer.Option(
        help="Share of each dataset set aside before fitting and used only to report the "
             "fitted rule on unseen questions (0 = fit on all).")] = 0.0,
    split_seed: Annotated[int, typer.Option(help="Seed of the --holdout split.")] = 0,
) -> None:
    """Fit lambda_bind and tau on a run's cached decisions (no model), cross-validated.

    Load the result with ``TrustMargin.from_pretrained(model, calibration=FILE)``.
    """
    from trustmargin_integrations.evaluation.bootstrap import check_resamples
    from trustmargin_integrations.evaluation.calibrate import calibrate_run, describe

    check_resamples(resamples, "--resamples")  # before any model or file work
    if objective not in ("f1", "em"):
        raise InvalidInputError("--objective", f"must be f1 or em, got {objective!r}",
                                "pass --objective f1 or --objective em")
    if folds == 1 or folds < 0:
        raise InvalidInputError("--folds", f"must be 0 or >= 2, got {folds}",
                                "use 5 (the default), or 0 to skip cross-validation")
    target = out or Path(run_dir) / "calibration.json"
    if target.is_dir():
        raise InvalidInputError("--out", f"{target} is a directory",
                                "pass a file path, e.g. --out DIR/calibration.json")
    check_run_dir(run_dir)
    calibration, cv = calibrate_run(run_dir, objective=objective,  # type: ignore[arg-type]
                                    folds=folds, seed=seed, resamples=resamples,
                                    holdout=holdout, split_seed=split_seed)
    for line in describe(calibration, cv):
        typer.echo(line)
    path = calibration.save(target)
    typer.echo(f"calibration: {plain(str(path))}")
    typer.echo(f"use it: TrustMargin.from_pretrained({calibration.model_id!r}, "
               f"calibration={str(path)!r})")
