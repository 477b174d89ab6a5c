"""The append-only result store and its cache keys (no model needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.store import CODE_VERSION, ResultStore, cache_key

BASE = {
    "model_id": "smollm2-135m",
    "prompt_version": "trustmargin-appendix-v1",
    "question": "Who wrote Hamlet?",
    "passages": ["Hamlet is a tragedy by William Shakespeare."],
    "settings": {"top_k": 3, "dtype": "float32"},
}


def test_key_changes_with_every_input_that_changes_results() -> None:
    key = cache_key(**BASE)
    assert key == cache_key(**BASE)  # stable
    changed = [
        {"model_id": "qwen2.5-1.5b"},
        {"prompt_version": "trustmargin-appendix-v2"},
        {"question": "Who wrote Macbeth?"},
        {"passages": ["Hamlet is a tragedy by William Shakespeare!"]},
        {"passages": [*BASE["passages"], "Another passage."]},
        {"settings": {"top_k": 3, "dtype": "bfloat16"}},
        {"direct_answer": "Shakespeare"},
        {"code_version": CODE_VERSION + "-next"},
    ]
    keys = {cache_key(**{**BASE, **change}) for change in changed}
    assert len(keys) == len(changed)
    assert key not in keys


def test_extract_results_are_keyed_by_the_extraction_prompt() -> None:
    # A run directory made under an earlier extraction prompt, or an earlier comparison by
    # difference, is recomputed, not reused; the paper's form keys on neither.
    from trustmargin_integrations import TrustMarginConfig
    from trustmargin_integrations.prompts import (
        DIFFERENCE_VERSION,
        EXTRACT_PROMPT_VERSION,
        form_prompts,
    )
    from trustmargin_integrations.score_file import key_settings

    extract = key_settings("m", TrustMarginConfig(scoring_form="extract"))
    assert extract["extract_prompt"] == EXTRACT_PROMPT_VERSION
    assert key_settings("m", TrustMarginConfig())["extract_prompt"] == EXTRACT_PROMPT_VERSION
    differential = key_settings("m", TrustMarginConfig(scoring_form="differential"))
    assert "extract_prompt" not in differential
    assert differential["difference"] == DIFFERENCE_VERSION
    assert form_prompts("auto")["difference"] == DIFFERENCE_VERSION
    assert form_prompts("paper") == {}


def test_put_get_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "run" / "cache.jsonl"
    store = ResultStore(path)
    store.put("a", {"x": 1, "nested": {"y": [1.5, "z"]}})
    store.put("b", {"x": 2})
    store.put("a", {"x": 3})  # newest wins
    again = ResultStore(path)
    assert len(again) == 2
    assert again.get("a") == {"x": 3}
    assert again.get("b") == {"x": 2}
    assert "c" not in again and again.get("c") is None
    # Append-only: three writes, three lines.
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3


def test_torn_last_line_is_ignored_and_never_glued_to(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    store = ResultStore(path)
    store.put("done", {"v": 1})
    with path.open("a", encoding="utf-8") as handle:  # a write killed half-way
        handle.write('{"key": "half", "sha": "00", "value": {"v"')
    reopened = ResultStore(path)
    assert reopened.get("done") == {"v": 1}
    assert "half" not in reopened
    reopened.put("next", {"v": 2})
    final = ResultStore(path)
    assert final.get("next") == {"v": 2} and final.get("done") == {"v": 1}
    assert final.skipped_lines == 1


def test_a_corrupted_record_fails_its_checksum(tmp_path: Path) -> None:
    path = tmp_path / "cache.jsonl"
    ResultStore(path).put("k", {"score": -1.25})
    line = json.loads(path.read_text(encoding="utf-8"))
    line["value"]["score"] = -0.5  # bit rot / a hand edit
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert "k" not in ResultStore(path)


APPEND_CHILD = textwrap.dedent("""
    import sys
    from trustmargin_integrations.store import ResultStore
    store = ResultStore(sys.argv[1])
    for i in range(int(sys.argv[3])):
        store.put(f"{sys.argv[2]}{i}", {"i": i, "pad": "x" * 50_000})
""")


def test_two_processes_appending_to_one_store_keep_every_record_whole(tmp_path: Path) -> None:
    """Two real processes append 200 records each to one store at the same time, after a
    killed run left a torn last line: every record is kept, none is torn or glued, and no
    blank line appears (each record is one write() under a lock). Before, a process that read
    the last byte while the other's record was half-written added a line break of its own:
    2 blank lines in each of 3 tries of this test."""
    path = tmp_path / "cache.jsonl"
    ResultStore(path).put("first", {"v": 0})
    with path.open("ab") as handle:
        handle.write(b'{"key": "torn", "sha"')  # a run killed mid-write
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([sys.executable, "-c", APPEND_CHILD, str(path), name, "200"],
                              env=env, stderr=subprocess.PIPE, text=True) for name in "ab"]
    errors = [proc.communicate(timeout=300)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], errors
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and b"" not in lines[:-1]  # no blank line anywhere
    store = ResultStore(path)
    assert store.skipped_lines == 1  # only the torn line
    assert len(store) == 401 and all(store.get(f"{n}{i}") is not None
                                     for n in "ab" for i in range(200))


def test_a_store_behind_a_link_or_with_a_second_name_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("my data\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "cache.jsonl").symlink_to(outside)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        ResultStore(run / "cache.jsonl").put("k", {"v": 1})
    linked = tmp_path / "hard.jsonl"
    os.link(outside, linked)  # e.g. an OUTPUT.cache hard-linked to the input file
    with pytest.raises(InvalidInputError, match="2 hard links"):
        ResultStore(linked).put("k", {"v": 1})
    assert outside.read_text(encoding="utf-8") == "my data\n"
