"""The CLI's one error boundary: every command, given the bad inputs
a hostile user or a broken machine produces, exits non-zero with one typed line that names
the option, never a traceback; text from corpora and paths reaches the terminal without
control characters.

Every case runs the real entry point (``trustmargin_integrations.cli.main``) in-process, on
real files. None of them loads a model: each input is refused before the model would load.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main
from cli_support import run_main
from rich.console import Console
from run_support import synthetic_run

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli import app
from trustmargin_integrations.cli.ask import _print_decision
from trustmargin_integrations.cli.boundary import GuardedCommand
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.schema import Passage

# Root ignores permission bits, so a chmod-ed folder is writable here; sysfs refuses new
# files to everyone, root included: a real read-only place.
READ_ONLY = Path("/sys")
ESCAPES = "\x1b[2J\x1b]52;c;SGVsbG8=\x07"  # clear screen; OSC 52 (set the clipboard)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every bad (and the few good) inputs the cases below name."""
    root = tmp_path_factory.mktemp("bad")
    good = {"question": "Who?", "passages": ["p"], "direct_answer": "a", "rag_answer": "b"}
    (root / "good.jsonl").write_text(json.dumps(good) + "\n", encoding="utf-8")
    nested = "[" * 100_000 + "]" * 100_000
    (root / "deep.jsonl").write_text(json.dumps(good)[:-1] + f', "extra": {nested}}}\n',
                                     encoding="utf-8")
    (root / "bigint.jsonl").write_text(json.dumps(good)[:-1] + f', "n": {"9" * 4_400}}}\n',
                                       encoding="utf-8")
    (root / "latin1.json").write_bytes(b'{"lambda_bind": 0.5, "tau": -1.5, "note": "\xe9t\xe9"}')
    (root / "corpus.jsonl").write_text(json.dumps({"title": "T", "text": "Paris."}) + "\n",
                                       encoding="utf-8")
    (root / "corpus_latin1.jsonl").write_bytes(b'{"title": "\xe9", "text": "x"}\n')
    (root / "corpus_deep.json").write_text(nested, encoding="utf-8")
    (root / "a_file").write_text("x", encoding="utf-8")
    (root / "empty.json").write_text("[]", encoding="utf-8")
    (root / "one.json").write_text(json.dumps(
        [{"test_id": 1, "question": "q?", "answer": "a", "passages": ["p"]}]), encoding="utf-8")
    (root / "empty_dir").mkdir()
    (root / "run_corrupt").mkdir()
    (root / "run_corrupt" / "manifest.json").write_text("{not json", encoding="utf-8")
    (root / "run_shape").mkdir()
    (root / "run_shape" / "manifest.json").write_text(
        json.dumps({"datasets": {"x": {"examples": [{"id": 1}]}}}), encoding="utf-8")
    synthetic_run(root / "run")
    return root


@dataclass(frozen=True)
class Case:
    """One command on one bad input, and the option its message must name."""

    name: str
    args: Callable[[Path], list[object]]
    names: str


CASES = [
    Case("score: JSON nested 100,000 deep", lambda f: [
        "score", "-i", f / "deep.jsonl", "-o", f / "o.jsonl"], "--input"),
    Case("score: an integer of 4,400 digits", lambda f: [
        "score", "-i", f / "bigint.jsonl", "-o", f / "o.jsonl"], "--input"),
    Case("score: non-UTF-8 --calibration", lambda f: [
        "score", "-i", f / "good.jsonl", "-o", f / "o.jsonl", "--calibration",
        f / "latin1.json"], "--calibration"),
    Case("score: --device banana", lambda f: [
        "score", "-i", f / "good.jsonl", "-o", f / "o.jsonl", "--device", "banana"], "--device"),
    Case("score: --device cuda:3 on this machine", lambda f: [
        "score", "-i", f / "good.jsonl", "-o", f / "o.jsonl", "--device", "cuda:3"], "--device"),
    Case("score: --model an empty directory", lambda f: [
        "score", "-i", f / "good.jsonl", "-o", f / "o.jsonl", "--model", f / "empty_dir"],
        "--model"),
    Case("demo: non-UTF-8 --calibration", lambda f: [
        "demo", "--calibration", f / "latin1.json"], "--calibration"),
    Case("demo: --model an empty directory", lambda f: [
        "demo", "--model", f / "empty_dir"], "--model"),
    Case("ask: non-UTF-8 corpus", lambda f: [
        "ask", "q?", "--corpus", f / "corpus_latin1.jsonl"], "--corpus"),
    Case("ask: corpus nested 100,000 deep", lambda f: [
        "ask", "q?", "--corpus", f / "corpus_deep.json"], "--corpus"),
    Case("ask: --device banana", lambda f: [
        "ask", "q?", "--corpus", f / "corpus.jsonl", "--device", "banana"], "--device"),
    Case("index: --out an existing file", lambda f: [
        "index", "--corpus", f / "corpus.jsonl", "--out", f / "a_file"], "--out"),
    Case("index: --out in a read-only folder", lambda f: [
        "index", "--corpus", f / "corpus.jsonl", "--out", READ_ONLY / "tm_index"], "--out"),
    Case("models: an unknown option", lambda f: ["models", "--bogus"], "--bogus"),
    Case("eval: a dataset file []", lambda f: [
        "eval", "--dataset", f / "empty.json", "--run-dir", f / "eval_run"], "--dataset"),
    Case("eval: a --retriever module that does not exist", lambda f: [
        "eval", "--dataset", f / "one.json", "--retrieval", "retriever", "--retriever",
        "no_such_module.search:make", "--run-dir", f / "eval_run"], "--retriever"),
    Case("eval: a --retriever module without the factory", lambda f: [
        "eval", "--dataset", f / "one.json", "--retrieval", "retriever", "--retriever",
        "json:no_such_factory", "--run-dir", f / "eval_run"], "--retriever"),
    Case("eval: --run-dir a file", lambda f: [
        "eval", "--dataset", f / "one.json", "--run-dir", f / "a_file"], "--run-dir"),
    Case("eval: --model an empty directory", lambda f: [
        "eval", "--dataset", f / "one.json", "--run-dir", f / "eval_run", "--model",
        f / "empty_dir"], "--model"),
    Case("report: a corrupt manifest", lambda f: ["report", f / "run_corrupt"], "RUN_DIR"),
    Case("report: a wrong-shaped manifest", lambda f: ["report", f / "run_shape"], "RUN_DIR"),
    Case("report: --out a directory", lambda f: [
        "report", f / "run", "--out", f / "empty_dir"], "--out"),
    Case("report: --out in a read-only folder", lambda f: [
        "report", f / "run", "--out", READ_ONLY / "tm" / "report.md"], "--out"),
    Case("report: non-UTF-8 --calibration", lambda f: [
        "report", f / "run", "--calibration", f / "latin1.json"], "--calibration"),
    Case("calibrate: a corrupt manifest", lambda f: [
        "calibrate", f / "run_corrupt"], "RUN_DIR"),
    Case("calibrate: a wrong-shaped manifest", lambda f: [
        "calibrate", f / "run_shape"], "RUN_DIR"),
    Case("calibrate: --out a directory", lambda f: [
        "calibrate", f / "run", "--out", f / "empty_dir"], "--out"),
    Case("check: --objective banana", lambda f: [
        "check", f / "run", "--objective", "banana"], "--objective"),
    Case("check: --holdout 1.5, refused before any answer is generated", lambda f: [
        "check", f / "one.json", "--holdout", "1.5"], "--holdout"),
    Case("check: --out a directory", lambda f: [
        "check", f / "run", "--out", f / "empty_dir"], "--out"),
    Case("calibrate: --out in a read-only folder", lambda f: [
        "calibrate", f / "run", "--folds", "0", "--resamples", "10", "--out",
        READ_ONLY / "tm_calibration.json"], "--out"),
]


def test_the_read_only_folder_is_read_only() -> None:
    """The read-only cases' premise: this process cannot create a file there."""
    with pytest.raises(OSError):
        (READ_ONLY / "tm_probe").write_text("x")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_typed_line_naming_the_option(case: Case, files: Path) -> None:
    run = run_main(*(str(a) for a in case.args(files)))
    assert run.exit_code == 2, run.output
    assert "Traceback" not in run.output
    last = run.output.strip().splitlines()[-1]
    assert case.names in run.output, run.output
    if case.names != "--bogus":  # a usage error is typer's own multi-line box
        assert last.startswith("error ") and "Fix:" in last and case.names in last, last


def test_every_command_runs_inside_the_boundary_and_has_a_case() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert all(isinstance(c, GuardedCommand) for c in commands.values())
    assert {c.args(Path("."))[0] for c in CASES} == set(commands)


def test_terminal_escapes_never_reach_the_terminal(tm: TrustMargin, files: Path) -> None:
    """A corpus title, a question and answers carrying clear-screen and OSC 52 sequences."""
    index = BM25Index.build([Passage(id="p1", title=f"Zelvora{ESCAPES}",
                                     text="Marta built the bridge."),
                             Passage(id="p2", title="Other", text="Nothing here.")])
    decision = tm.answer(f"Who built the bridge?{ESCAPES}", index, 2,
                         direct_answer=f"Gustave{ESCAPES}", rag_answer="Marta")
    console = Console(record=True, width=200)
    import trustmargin_integrations.cli.ask as ask_module

    original, ask_module.console = ask_module.console, console  # type: ignore[assignment]
    try:
        _print_decision(decision, include_prompts=True)
    finally:
        ask_module.console = original
    shown = console.export_text()
    assert "Zelvora[2J]52;c;SGVsbG8=" in shown  # the text is kept, only the controls go
    assert "\x1b" not in shown and "\x07" not in shown
    # A path printed by `report` (the run folder's own name) is cleaned the same way.
    run_dir = synthetic_run(files / f"run{ESCAPES}")
    run = run_main("report", str(run_dir))
    assert run.exit_code == 0, run.output
    assert "report: " in run.output and "\x1b" not in run.output and "\x07" not in run.output
