"""A number written with ``_`` is refused wherever the project parses numbers a person typed:
every number option of every command, ``--noise-levels`` and the numeric environment
variables. Python's parsers (and pydantic's) read ``1_0`` as 10, which whoever typed it (or a
script that glued two values together) did not mean.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_main
from run_support import forbid_model_load, synthetic_run

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.waits import Waits


@pytest.fixture(autouse=True)
def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_model_load(monkeypatch)


def test_number_options_refuse_digit_separators(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    src = tmp_path / "in.jsonl"
    src.write_text('{"question": "q", "passages": ["p"], "direct_answer": "a", '
                   '"rag_answer": "b"}\n', encoding="utf-8")
    out = str(tmp_path / "out.jsonl")
    cases = [
        (["calibrate", str(run), "--folds", "1_0"], "--folds"),
        (["calibrate", str(run), "--resamples=1_000"], "--resamples"),
        (["check", str(run), "--holdout", "0.2_5"], "--holdout"),
        (["score", "-i", str(src), "-o", out, "--tau", "-1_0"], "--tau"),
        (["score", "-i", str(src), "-o", out, "--batch-size=1_6"], "--batch-size"),
        (["ask", "Who?", "--corpus", str(src), "-k1_0"], "--top-k"),
        (["eval", "--dataset", str(src), "--noise-levels", "0,1_0"], "--noise-levels"),
    ]
    for args, option in cases:
        done = run_main(*args)
        assert done.exit_code == 2, (args, done.output)
        assert done.output.startswith(f"error {option}:"), (args, done.output)
        assert "not a number" in done.output or "not a list of integers" in done.output
    assert not (tmp_path / "out.jsonl").exists() and not (run / "calibration.json").exists()


@pytest.mark.parametrize(("prefix", "name", "value"), [
    ("TRUSTMARGIN_REMOTE", "RETRIES", "1_0"), ("TRUSTMARGIN_REMOTE", "TIMEOUT", "1_0.5"),
    ("TRUSTMARGIN_ES", "READ_TIMEOUT", "6_0"), ("TRUSTMARGIN_ES", "CONNECT_TIMEOUT", "1_0"),
])
def test_numeric_variables_refuse_digit_separators(monkeypatch: pytest.MonkeyPatch,
                                                   prefix: str, name: str, value: str) -> None:
    monkeypatch.setenv(f"{prefix}_{name}", value)
    with pytest.raises(InvalidInputError) as err:
        Waits.resolve(prefix)
    assert err.value.field == f"{prefix}_{name}" and repr(value) in err.value.problem
    monkeypatch.setenv(f"{prefix}_{name}", value.replace("_", ""))
    assert Waits.resolve(prefix)  # the same number without '_' is fine
