"""One output guard for every file the project writes: never an input of the same command,
never a run directory's own cache or manifest, never a link, a directory or a special file
(a FIFO, a character device), each refused before any work with one line naming the option.

Every case runs the real entry point in-process on real files; none loads a model (a model
load fails the test): each refusal comes before it. Before the guard, ``check six.jsonl
--out six.jsonl`` replaced the labeled questions with a policy after generating everything,
``calibrate RUN --out RUN/cache.jsonl`` destroyed the cached results, and the final rename
replaced a FIFO with a regular file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_support import run_main
from run_support import forbid_model_load, synthetic_run
from score_support import GOOD
from typer.testing import CliRunner

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli import app
from trustmargin_integrations.errors import InvalidInputError, TrustMarginError
from trustmargin_integrations.files import atomic_output, check_destination
from trustmargin_integrations.store import ResultStore

SIX = [("Who wrote Hamlet?", "Shakespeare"), ("What is the capital of France?", "Paris"),
       ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
       ("What is the largest planet?", "Jupiter"), ("Who discovered penicillin?", "Fleming"),
       ("At what temperature does water boil?", "100 degrees")]


def _labeled(path: Path) -> Path:
    path.write_text("".join(json.dumps({"id": str(i), "question": q, "answer": a,
                                        "passages": [f"{q} {a}."]}) + "\n"
                            for i, (q, a) in enumerate(SIX)), encoding="utf-8")
    return path


def _refused(args: list[str], option: str, problem: str) -> str:
    """Run the command; it must exit 2 with one error line naming ``option``."""
    run = run_main(*args)
    assert run.exit_code == 2, run.output
    errors = [line for line in run.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(f"error {option}:"), run.output
    assert problem in errors[0] and "Fix:" in errors[0], errors[0]
    return errors[0]


def _snapshot(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(autouse=True)
def _no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    forbid_model_load(monkeypatch)


def test_check_never_writes_its_policy_over_the_labeled_file(tmp_path: Path) -> None:
    six = _labeled(tmp_path / "six.jsonl")
    before = six.read_bytes()
    _refused(["check", str(six), "--out", str(six), "--folds", "2"], "--out",
             "is the input file of LABELED")
    # Through `..` too, and the corpus is an input as well.
    _refused(["check", str(six), "--out", str(tmp_path / "x" / ".." / "six.jsonl"),
              "--folds", "2"], "--out", "is the input file")
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"title": "T", "text": "Paris."}]), encoding="utf-8")
    _refused(["check", str(six), "--corpus", str(corpus), "--out", str(corpus)], "--out",
             "is the input file of --corpus")
    assert six.read_bytes() == before
    assert not (tmp_path / "six.jsonl.check").exists()  # refused before any work


def test_calibrate_check_and_report_never_write_over_a_run_directorys_files(
        tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    before = _snapshot(run)
    for name in ("cache.jsonl", "manifest.json"):
        target = str(run / name)
        _refused(["calibrate", str(run), "--out", target, "--folds", "2"], "--out",
                 "which this command does not write")
        _refused(["check", str(run), "--out", target, "--folds", "2"], "--out",
                 "which this command does not write")
        _refused(["report", str(run), "--out", target], "--out",
                 "which this command does not write")
    # Another run's files are just as protected as the run the command reads.
    other = synthetic_run(tmp_path / "other")
    _refused(["calibrate", str(run), "--out", str(other / "cache.jsonl"), "--folds", "2"],
             "--out", f"the result cache of the run {other}")
    assert _snapshot(run) == before


def test_score_and_report_never_write_over_the_calibration_they_read(tmp_path: Path) -> None:
    run = synthetic_run(tmp_path / "run")
    calibrated = run_main("calibrate", str(run), "--folds", "2", "--resamples", "200",
                          "--out", str(tmp_path / "cal.json"))
    assert calibrated.exit_code == 0, calibrated.output
    cal = tmp_path / "cal.json"
    before = cal.read_bytes()
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": "q", "passages": ["p"], "direct_answer": "a",
                               "rag_answer": "b"}) + "\n", encoding="utf-8")
    _refused(["score", "-i", str(src), "-o", str(cal), "--calibration", str(cal)], "--output",
             "is the input file of --calibration")
    _refused(["report", str(run), "--out", str(cal), "--calibration", str(cal)], "--out",
             "is the input file of --calibration")
    _refused(["demo", "--output", str(cal), "--calibration", str(cal)], "--output",
             "is the input file of --calibration")
    _refused(["score", "-i", str(src), "-o", str(run / "cache.jsonl")], "--output",
             "which this command does not write")
    assert cal.read_bytes() == before


def test_a_fifo_is_never_replaced_and_is_named_as_a_fifo(tmp_path: Path) -> None:
    """``score -o FIFO`` said "is a directory"; ``calibrate --out FIFO`` and ``report
    --out FIFO`` replaced the FIFO with a regular file by their final rename."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": "q", "passages": ["p"], "direct_answer": "a",
                               "rag_answer": "b"}) + "\n", encoding="utf-8")
    run = synthetic_run(tmp_path / "run")
    _refused(["score", "-i", str(src), "-o", str(fifo)], "--output", "is a named pipe (FIFO)")
    _refused(["calibrate", str(run), "--out", str(fifo), "--folds", "2"], "--out",
             "is a named pipe (FIFO)")
    _refused(["report", str(run), "--out", str(fifo)], "--out", "is a named pipe (FIFO)")
    _refused(["check", str(run), "--out", str(fifo), "--folds", "2"], "--out",
             "is a named pipe (FIFO)")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_eval_refuses_a_special_file_where_it_writes_its_report(tmp_path: Path) -> None:
    """``eval`` owns its run directory, yet what it writes there goes through the same guard
    (before the model loads)."""
    data = _labeled(tmp_path / "data.jsonl")
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "report.md")
    _refused(["eval", "--dataset", str(data), "--run-dir", str(run)], "--run-dir",
             "is a named pipe (FIFO)")
    _refused(["eval", "--dataset", str(data), "--run-dir", str(run), "--no-report",
              "--noise-corpus", str(run / "manifest.json")], "--run-dir",
             "is the input file of --noise-corpus")
    assert stat.S_ISFIFO((run / "report.md").lstat().st_mode)


def test_index_never_writes_over_its_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "idx"
    folder.mkdir()
    corpus = folder / "trustmargin_passages.json"
    corpus.write_text(json.dumps([{"title": "T", "text": "Paris is in France."}]),
                      encoding="utf-8")
    before = corpus.read_bytes()
    _refused(["index", "--corpus", str(corpus), "--out", str(folder)], "--out",
             "is the input file of --corpus")
    assert corpus.read_bytes() == before


def test_the_writer_refuses_a_character_device_and_a_fifo_planted_at_the_rename(
        tmp_path: Path) -> None:
    """Every write goes through the same check at its final rename: as root, replacing
    ``/dev/null`` by a regular file would break the machine."""
    with pytest.raises(InvalidInputError, match="is a character device") as err:
        check_destination(Path("/dev/null"))
    assert err.value.field == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    from trustmargin_integrations.files import check_output  # the guard every writer calls

    with pytest.raises(InvalidInputError) as err:
        check_output(Path("/dev/null"), "--out")
    assert err.value.field == "--out" and "character device" in err.value.problem
    fifo = tmp_path / "late"
    with pytest.raises(InvalidInputError, match="named pipe"), atomic_output(fifo) as handle:
        handle.write("x")
        os.mkfifo(fifo)  # appears while the content is written
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["late"]  # the temporary file is gone


def test_a_hard_link_to_an_input_is_the_input(tmp_path: Path) -> None:
    from trustmargin_integrations.files import check_output

    six = _labeled(tmp_path / "six.jsonl")
    os.link(six, tmp_path / "alias.json")
    with pytest.raises(InvalidInputError, match="is the input file of LABELED"):
        check_output(tmp_path / "alias.json", "--out", inputs={"LABELED": six})


@pytest.mark.slow
def test_a_crafted_dataset_name_cannot_write_outside_the_run(
    tm: TrustMargin, tmp_path: Path
) -> None:
    decisions = tm.arbitrate_batch([
        {"question": "What is the capital of France?", "passages": [
            "Paris is the capital of France."], "direct_answer": "Lyon", "rag_answer": "Paris"},
        {**GOOD, "id": "z"}])
    outside = tmp_path / "a" / "b"
    run_dir = outside / "run"
    store = ResultStore(run_dir / "cache.jsonl")
    examples = []
    for i, (decision, gold) in enumerate(zip(decisions, ["Paris", "Marta Okonkwo"],
                                             strict=True)):
        store.put(f"k{i}", {"decision": decision.model_dump(mode="json"), "retrieval_s": 0.0})
        examples.append({"id": str(i), "answers": [gold], "key": f"k{i}", "type": None})
    crafted = ["x/../../../evil", "/../../../../abs_evil", "../../evil", "..\\..\\win_evil"]
    manifest = {"datasets": {name: {"model": "smollm2-135m", "retrieval": "given",
                                    "examples": examples} for name in crafted}}
    (run_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    before = {p for p in tmp_path.rglob("*")}
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    if result.exception is not None:  # refusing the manifest is fine, if it is a typed error
        assert isinstance(result.exception, TrustMarginError), repr(result.exception)
    written = {p for p in tmp_path.rglob("*")} - before
    escaped = sorted(str(p) for p in written if run_dir not in p.parents)
    assert not escaped, f"report wrote outside {run_dir}: {escaped}"
