"""``trustmargin score``: arbitrate a file of given candidates, resumably."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trustmargin_integrations.cli.app import command, console
from trustmargin_integrations.cli.boundary import shown_markup
from trustmargin_integrations.cli.common import (
    backend_choice,
    calibration_option,
    calibration_path,
    config_from_options,
    load_arbiter,
    rule_options,
)
from trustmargin_integrations.cli.options import (
    BackendOpt,
    CalibrationOpt,
    ConcurrencyOpt,
    DeviceOpt,
    DtypeOpt,
    LambdaOpt,
    ModelOpt,
    PromptsOpt,
    RemoteModelOpt,
    RemoteUrlOpt,
    TauOpt,
)


@command()
def score(
    input: Annotated[Path, typer.Option("--input", "-i", help=(
        "JSONL of candidates: question, passages (list of str), direct_answer, rag_answer, "
        "and optionally id (default: line number)."))],
    output: Annotated[Path, typer.Option("--output", "-o", help="Decisions (JSONL).")],
    backend: BackendOpt = None,
    model: ModelOpt = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Questions per model call.")] = 8,
    include_prompts: PromptsOpt = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    remote_url: RemoteUrlOpt = None,
    remote_model: RemoteModelOpt = None,
    concurrency: ConcurrencyOpt = None,
    tau: TauOpt = None,
    lambda_bind: LambdaOpt = None,
    calibration: CalibrationOpt = None,
) -> None:
    """Arbitrate given candidates (another system's outputs) without generating anything.

    The whole file is validated before the model loads. Resumable: finished decisions are
    kept in OUTPUT.cache (keyed by the record, model and settings) and OUTPUT is written
    complete, in input order, at the end. Keys other than the candidate fields are carried
    to each decision's metadata.
    """
    from trustmargin_integrations.score_file import key_settings, run_score, server_identity

    choice = backend_choice(backend, model, remote_url, remote_model, device=device,
                            dtype=dtype, concurrency=concurrency)
    rule = rule_options(tau, lambda_bind)
    settings = config_from_options(batch_size=batch_size, include_prompts=include_prompts,
                                   **rule)
    fitted = calibration_option(calibration, choice.model, rule)
    if fitted is not None:
        # The cache key holds the rule in force, so a calibrated run never reuses another's.
        settings = fitted.apply(settings)
    choice.check()
    # A server's results are keyed by what computes them (the served model and the
    # tokenizer), as check's are, not by the URLs: any fleet of the model resumes the run.
    keyed = key_settings(choice.model, settings, dtype=dtype, device=device,
                         **({} if choice.local else server_identity(choice.specs)))

    def told(reused: int, todo: int) -> None:
        if reused:
            console.print(f"resuming: {reused} decisions reused from {shown_markup(str(output))}"
                          f".cache, {todo} to compute")

    report = run_score(
        input, output, keyed,
        lambda: load_arbiter(choice, batch_size=batch_size, include_prompts=include_prompts,
                             calibration=fitted, **rule),
        batch_size=batch_size, on_reuse=told, calibration=calibration_path(calibration),
        numerics=(lambda: _threads(device)) if choice.local else None,
    )
    console.print(f"{report.records} decisions in {shown_markup(str(report.output))} "
                  f"({report.computed} computed, {report.reused} reused)")


def _threads(device: str | None) -> dict[str, int]:
    """The local model's CPU thread count as a key setting (nothing on a GPU)."""
    from trustmargin_integrations.backends.loading import cpu_threads

    threads = cpu_threads(device)
    return {} if threads is None else {"threads": threads}
