"""The ``score`` job (:func:`score_file.run_score`) on real files, real processes and the real
embedded model: it never truncates or rewrites an output in place, resumes by content (not by
ids, files or places), validates the whole input file before the model loads, and shares an
output safely with another process.

Kills under SIGKILL/SIGINT mid-run are in tests/test_reliability_faults.py; resume at every
batch size in tests/test_resume_exact.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from score_support import (
    ENV,
    GOOD,
    PASSAGE,
    QUESTION,
    Loader,
    decisions_in,
    score_settings,
    write_jsonl,
)

from trustmargin_integrations import Decision, InvalidInputError, TrustMargin
from trustmargin_integrations.files import TEMP_MARK, TEMP_SUFFIX, temp_path
from trustmargin_integrations.score_file import run_score
from trustmargin_integrations.store import ResultStore

# -- an interrupted or refused run leaves every file as it was -------------------------------


class _Interrupting:
    """The real arbiter; a Ctrl-C arrives while its second batch is computed."""

    def __init__(self, tm: TrustMargin) -> None:
        self.tm = tm
        self.batches = 0

    def prepare_batch(self, items: Any, **kwargs: Any) -> Any:
        return self.tm.prepare_batch(items, **kwargs)

    def arbitrate_batch(self, items: Any, **kwargs: Any) -> list[Decision]:
        self.batches += 1
        if self.batches == 2:
            raise KeyboardInterrupt
        return self.tm.arbitrate_batch(items, **kwargs)


@pytest.mark.slow
def test_an_interrupted_rerun_leaves_the_previous_output_intact(
    tm: TrustMargin, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    first = write_jsonl(tmp_path / "a.jsonl", [GOOD])
    run_score(first, out, score_settings(), Loader(tm), batch_size=1, progress=False)
    before = out.read_bytes()
    rows = [{**GOOD, "question": f"{QUESTION} ({n})"} for n in range(3)]
    second = write_jsonl(tmp_path / "b.jsonl", rows)
    with pytest.raises(KeyboardInterrupt):
        run_score(second, out, score_settings(), lambda: _Interrupting(tm),  # type: ignore[arg-type, return-value]
                  batch_size=1, progress=False)
    assert out.read_bytes() == before  # the old output, whole: not truncated, not mixed
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.jsonl", "b.jsonl", "out.jsonl", "out.jsonl.cache"]  # no temporary file left
    assert len(ResultStore(tmp_path / "out.jsonl.cache")) == 2  # the finished batch is kept
    loader = Loader(tm)
    report = run_score(second, out, score_settings(), loader, batch_size=1, progress=False)
    assert (report.computed, report.reused) == (2, 1)
    assert [d["question"] for d in decisions_in(out)] == [r["question"] for r in rows]


def test_an_input_named_like_the_outputs_store_is_never_written(tmp_path: Path) -> None:
    """``OUTPUT.cache`` is the store that the job appends to: when it is the input file,
    the job must refuse, not append its results to the user's input."""
    src = write_jsonl(tmp_path / "run.jsonl.cache", [GOOD])
    before = src.read_bytes()
    with pytest.raises(InvalidInputError) as err:
        run_score(src, tmp_path / "run.jsonl", score_settings(), Loader(None), batch_size=1,
                  progress=False)
    assert err.value.field in ("--output", "--input") and "Fix:" in str(err.value)
    assert src.read_bytes() == before
    assert not (tmp_path / "run.jsonl").exists()


def test_a_dict_as_passages_is_a_typed_error_in_score(tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD, {**GOOD, "passages": {"text": PASSAGE}}])
    with pytest.raises(InvalidInputError) as err:
        run_score(src, tmp_path / "o.jsonl", score_settings(), Loader(None), batch_size=1,
                  progress=False)
    assert err.value.field == f"{src}:2.passages" and "list" in err.value.fix


# -- resume follows the content ---------------------------------------------------------------


@pytest.mark.slow
def test_resume_follows_the_content_across_files_models_and_ids(
    tm: TrustMargin, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    a = {**GOOD}
    b = {**GOOD, "question": "Who opened the Zelvora Bridge?"}
    c = {**GOOD, "question": "Which engineer built the Zelvora Bridge?"}
    # Line 1 has no id (so its id is "1"); line 2 has the int id 1: the same id, other text.
    first = write_jsonl(tmp_path / "first.jsonl", [a, {**b, "id": 1}])
    loader = Loader(tm)
    report = run_score(first, out, score_settings(), loader, batch_size=2, progress=False)
    assert (report.computed, report.reused) == (2, 0)
    assert [(d["id"], d["question"]) for d in decisions_in(out)] == [
        ("1", a["question"]), ("1", b["question"])]
    # Another input file into the same output: shared records are reused whatever their
    # ids and places; the output is exactly the new file's, in its order.
    second = write_jsonl(tmp_path / "second.jsonl",
                         [{**c, "id": "c"}, {**b, "id": "b", "gold": "x"}, {**a, "id": None}])
    report = run_score(second, out, score_settings(), loader, batch_size=2, progress=False)
    assert (report.computed, report.reused) == (1, 2)
    decisions = decisions_in(out)
    assert [(d["id"], d["question"]) for d in decisions] == [
        ("c", c["question"]), ("b", b["question"]), (None, a["question"])]
    assert [d["metadata"] for d in decisions] == [{}, {"gold": "x"}, {}]
    # Another model is another key: nothing is reused.
    report = run_score(second, out, score_settings("another-model"), loader, batch_size=2,
                       progress=False)
    assert (report.computed, report.reused) == (3, 0)


# -- the whole file is validated before the model loads -----------------------------------


def test_the_whole_file_is_validated_before_the_model_loads(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [{**GOOD, "id": f"q{i}", "gold": "Marta Okonkwo"}
                                  for i in range(2_999)]
    rows.append({**GOOD, "passages": PASSAGE})  # line 3,000: one passage as a bare string
    src = write_jsonl(tmp_path / "big.jsonl", rows)
    out = tmp_path / "out.jsonl"
    with pytest.raises(InvalidInputError) as err:
        run_score(src, out, score_settings(), Loader(None), batch_size=8, progress=False)
    assert err.value.field == f"{src}:3000.passages"
    assert "list" in err.value.problem and err.value.fix
    assert not out.exists() and not (tmp_path / "out.jsonl.cache").exists()
    # An extra key that is also a metadata key is ambiguous: named, with its line.
    write_jsonl(src, [GOOD, {**GOOD, "gold": "a", "metadata": {"gold": "b"}}])
    with pytest.raises(InvalidInputError) as clash:
        run_score(src, out, score_settings(), Loader(None), batch_size=8, progress=False)
    assert clash.value.field == f"{src}:2.gold"


@pytest.mark.parametrize("extra", [{"id": "q-\ud800"}, {"gold": "\udcff"}])
def test_a_lone_surrogate_in_a_jsonl_id_or_extra_key_never_breaks_score(
    tm: TrustMargin, tmp_path: Path, extra: dict[str, Any]
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **extra}) + "\n",
                   encoding="utf-8")
    out = tmp_path / "o.jsonl"
    try:
        run_score(src, out, score_settings(), Loader(tm), batch_size=2, progress=False)
    except InvalidInputError as exc:
        assert exc.field.startswith(f"{src}:2"), exc  # refused, naming the line
        return
    assert len(decisions_in(out)) == 2  # or written: the output is valid UTF-8 JSON lines


# -- two processes, links, hard links, file modes --------------------------------------------

SCORE_LOOP_CHILD = """
import sys
from pathlib import Path
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.score_file import key_settings, run_score

def no_model():
    raise SystemExit("every record is cached: the model must not load")

settings = key_settings("smollm2-135m", TrustMarginConfig(), dtype=None, device=None,
                        remote=None)
for _ in range(int(sys.argv[3])):
    run_score(Path(sys.argv[1]), Path(sys.argv[2]), settings, no_model, batch_size=1,
              progress=False)
"""


def _cached_output(tm: TrustMargin, root: Path, lines: int) -> tuple[Path, Path]:
    """An input of ``lines`` copies of GOOD (own ids) whose one result is already stored."""
    out = root / "out.jsonl"
    run_score(write_jsonl(root / "one.jsonl", [GOOD]), out, score_settings(), Loader(tm),
              batch_size=1, progress=False)
    return write_jsonl(root / "in.jsonl", [{**GOOD, "id": f"q{i}"} for i in range(lines)]), out


@pytest.mark.slow
def test_two_score_processes_on_one_output_both_finish(tm: TrustMargin, tmp_path: Path) -> None:
    """Two real ``score`` processes write one output, 12 times each, at the same time. Before,
    one crashed (FileNotFoundError) in most rounds: its stale-temp cleanup deleted the other's
    in-flight temporary file."""
    src, out = _cached_output(tm, tmp_path, 3000)
    procs = [subprocess.Popen([sys.executable, "-c", SCORE_LOOP_CHILD, str(src), str(out),
                               "12"], env=ENV, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errors = [proc.communicate(timeout=600)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [e[-2000:] for e in errors]
    assert [d["id"] for d in decisions_in(out)] == [f"q{i}" for i in range(3000)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.jsonl", "one.jsonl", "out.jsonl", "out.jsonl.cache"]


def test_score_leaves_a_live_writers_temporary_file_alone(tm: TrustMargin,
                                                          tmp_path: Path) -> None:
    src, out = _cached_output(tm, tmp_path, 2)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # NAME.writing-HOST-PID-TOKEN.tmp, as the live process would name its temp.
        host = temp_path(out).name.split(TEMP_MARK)[1].rsplit("-", 2)[0]
        theirs = tmp_path / f"out.jsonl{TEMP_MARK}{host}-{live.pid}-0a0a{TEMP_SUFFIX}"
        theirs.write_text("another run's output, half written", encoding="utf-8")
        run_score(src, out, score_settings(), Loader(None), batch_size=1, progress=False)
        assert theirs.exists(), "score deleted a live process's temporary file"
    finally:
        live.kill()
        live.wait()


def test_score_refuses_a_store_that_is_the_input_or_a_link(tmp_path: Path) -> None:
    """``OUTPUT.cache`` hard-linked to the input (before: the run appended its results to
    the input file) or a symbolic link to a file elsewhere is refused before the model loads,
    and neither file changes."""
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD])
    before = src.read_bytes()
    out = tmp_path / "out.jsonl"
    os.link(src, tmp_path / "out.jsonl.cache")
    with pytest.raises(InvalidInputError) as err:
        run_score(src, out, score_settings(), Loader(None), batch_size=1, progress=False)
    assert err.value.field == "--input" and "store" in err.value.problem
    (tmp_path / "out.jsonl.cache").unlink()
    victim = write_jsonl(tmp_path / "elsewhere.jsonl", [])
    (tmp_path / "out.jsonl.cache").symlink_to(victim)
    with pytest.raises(InvalidInputError, match="symbolic link") as err:
        run_score(src, out, score_settings(), Loader(None), batch_size=1, progress=False)
    assert err.value.field == "--output"
    assert src.read_bytes() == before and victim.read_bytes() == b"" and not out.exists()


def test_score_output_and_store_get_the_same_file_mode(tm: TrustMargin, tmp_path: Path) -> None:
    """Before, the output was 0600 (a private temporary file renamed) and its store 0644."""
    _, out = _cached_output(tm, tmp_path, 1)
    umask = os.umask(0)
    os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (out, tmp_path / "out.jsonl.cache")}
    assert set(modes.values()) == {0o666 & ~umask}, modes
