"""``trustmargin calibrate``: fit lambda_bind and tau on a run's cached decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command
from trustmargin_integrations.cli.boundary import shown
from trustmargin_integrations.cli.common import check_run_dir, usage_line
from trustmargin_integrations.cli.options import ObjectiveOpt
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.policy_file import check_objective


@command()
def calibrate(
    run_dir: Annotated[Path, typer.Argument(help="A directory written by `trustmargin eval`.")],
    out: Annotated[Path | None, typer.Option(
        help="Policy file to write: the fitted rule (default RUN_DIR/calibration.json).")] = None,
    objective: ObjectiveOpt = "f1",
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
    from trustmargin_integrations.evaluation.bootstrap import check_resamples, check_seed
    from trustmargin_integrations.evaluation.calibrate_command import (
        LoadedRun,
        calibrate_run,
        describe,
    )

    check_resamples(resamples, "--resamples")  # before any model or file work
    check_seed(seed, "--seed")
    check_seed(split_seed, "--split-seed")
    objective = check_objective(objective, "--objective")
    if folds == 1 or folds < 0:
        raise InvalidInputError("--folds", f"must be 0 or >= 2, got {folds}",
                                "use 5 (the default), or 0 to skip cross-validation")
    from trustmargin_integrations.output_guard import guard_output

    target = guard_output(out or Path(run_dir) / "calibration.json", "--out", run_dir=run_dir)
    check_run_dir(run_dir)
    loaded = LoadedRun.read(run_dir)
    if loaded.repeats:
        typer.echo(f"warning: {shown(loaded.repeats)}", err=True)
    calibration, cv = calibrate_run(loaded, objective=objective,
                                    folds=folds, seed=seed, resamples=resamples,
                                    holdout=holdout, split_seed=split_seed)
    for line in describe(calibration, cv):
        typer.echo(line)
    path = calibration.save(target)
    typer.echo(f"calibration: {shown(str(path))}")
    typer.echo(usage_line(calibration, path))
