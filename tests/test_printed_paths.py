"""A path the commands print (a run directory, an output file) or quote in an error line is
printed on one line and exactly: a newline, tab or Unicode line separator in a folder's name
is written as its escape (``\\n``), not as a line break that splits the path (before, a
run directory named ``run<newline>2024`` printed as two lines, the second looking like a
separate message).
"""

from __future__ import annotations

from pathlib import Path

from cli_support import run_main
from run_support import synthetic_run

ODD = "run\n2024\t\u2028x"
ESCAPED = "run\\n2024\\t\\u2028x"


def test_printed_paths_keep_their_control_characters_escaped(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / ODD)
    calibrated = run_main("calibrate", str(run), "--folds", "2", "--resamples", "200")
    assert calibrated.exit_code == 0, calibrated.output
    line = next(x for x in calibrated.output.splitlines() if x.startswith("calibration: "))
    assert line == f"calibration: {tmp_path}/{ESCAPED}/calibration.json"
    checked = run_main("check", str(run), "--folds", "2", "--resamples", "200")
    assert checked.exit_code == 0, checked.output
    assert f"policy: {tmp_path}/{ESCAPED}/policy.json" in checked.output.splitlines()
    reported = run_main("report", str(run))
    assert reported.exit_code == 0, reported.output
    assert f"report: {tmp_path}/{ESCAPED}/report.md" in reported.output.splitlines()


def test_an_error_line_quoting_a_path_stays_one_line(tmp_path: Path) -> None:
    missing = tmp_path / ODD
    done = run_main("report", str(missing))
    assert done.exit_code == 2
    lines = done.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error run_dir:"), done.output
    assert ESCAPED in lines[0]
