"""The real ``trustmargin`` entry point run in-process, as a shell would run it: its typed
errors reach the user through :func:`trustmargin_integrations.cli.main` (one line, exit 2)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

import trustmargin_integrations
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


DEMO = Path(trustmargin_integrations.__file__).parent / "demo_data"
"""The demo's questions and corpus, shipped with the package."""


def write_labeled(path: Path, ids: Sequence[str]) -> Path:
    """A user's labeled JSONL file (no passages) of the demo questions ``ids``."""
    questions = {q["id"]: q for q in json.loads((DEMO / "questions.json").read_text())}
    path.write_text("".join(json.dumps({"id": i, "question": questions[i]["question"],
                                        "answers": questions[i]["answers"]}) + "\n"
                            for i in ids), encoding="utf-8")
    return path
