"""What the real command prints: a user's text literally (Rich markup in a question, an answer
or a path is text, not style), and an error as one unwrapped line with exit status 2, never a
traceback, whatever the terminal width or the bytes of an argument.

The error lines of every command on every bad input are in tests/test_cli_boundary.py; these
cases run the command in its own process (a real argv, a real terminal width) where that is
what is tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from score_support import ENV, GOOD, PASSAGE, run_cli, write_jsonl
from typer.testing import CliRunner

from trustmargin_integrations.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_markup_in_questions_and_answers_is_printed_literally(demo_corpus_jsonl: Path) -> None:
    question = "Who designed [/] the [bold]Zelvora[/bold] Bridge?"
    result = runner.invoke(app, ["ask", question, "--corpus", str(demo_corpus_jsonl),
                                 "--direct-answer", "[red]Gustave Eiffel",
                                 "--rag-answer", "Marta Okonkwo [/]"])
    assert result.exit_code == 0, (result.output, result.exception)
    assert question in result.output
    assert "'[red]Gustave Eiffel'" in result.output and "'Marta Okonkwo [/]'" in result.output


def test_markup_in_an_error_is_printed_literally(tmp_path: Path) -> None:
    missing = tmp_path / "[bold]x[/bold]" / "[/]in.jsonl"
    done = run_cli("score", "-i", str(missing), "-o", str(tmp_path / "o.jsonl"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"error --input: {missing} is not a file. Fix: pass a "
                                   "JSONL file")


def test_errors_are_one_unwrapped_line_at_80_columns(tmp_path: Path) -> None:
    deep = tmp_path.joinpath("a-rather-long-folder-name-for-wrapping",
                             "another-fairly-long-sub-folder-name", "and-one-more-level")
    deep.mkdir(parents=True)
    src = write_jsonl(deep / "candidates-with-a-long-file-name.jsonl",
                      [GOOD, {**GOOD, "passages": PASSAGE}])
    done = run_cli("score", "-i", str(src), "-o", str(deep / "o.jsonl"), env={"COLUMNS": "80"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, done.stderr
    assert f"{src}:2.passages" in lines[0]  # the path and the field, whole
    assert lines[0].endswith("Fix: pass a list of passage texts or Passage records (wrap a "
                             "single passage in a list)")
    assert done.stdout == ""


@pytest.mark.slow
def test_ask_with_a_non_utf8_argument_exits_2(demo_corpus_jsonl: Path) -> None:
    # Python decodes the byte 0xff of argv with surrogateescape: the question is "\udcff".
    done = subprocess.run([sys.executable, "-m", "trustmargin_integrations", "ask", b"\xff",
                           "--corpus", str(demo_corpus_jsonl), "--direct-answer", "a",
                           "--rag-answer", "b"], env=ENV, capture_output=True, text=True,
                          errors="replace", timeout=300)
    lines = [x for x in done.stderr.splitlines()
             if x.strip() and not x.startswith("Loading weights")]  # the model's progress bar
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error ") and "question" in lines[0]
    assert "Fix:" in lines[0] and "Traceback" not in done.stderr


def test_a_non_numeric_port_exits_2_with_one_line(demo_corpus_jsonl: Path) -> None:
    for args in (["--elasticsearch", "http://h:abc"],
                 ["--corpus", str(demo_corpus_jsonl), "--remote-url", "http://h:abc"]):
        done = run_cli("ask", "q?", *args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "port that is not a number" in lines[0], done.stderr
        assert lines[0].startswith(("error url:", "error base_url:"))
