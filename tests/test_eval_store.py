"""The append-only result store and its cache keys (no model needed)."""

from __future__ import annotations

import json
from pathlib import Path

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
