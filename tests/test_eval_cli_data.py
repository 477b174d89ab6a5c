"""Dataset loaders and the eval/report commands' input checks (no model is loaded)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_support import run_main

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample, load_dataset, load_examples
from trustmargin_integrations.evaluation.pipeline_runner import first_of_each_type

# The benchmark data lies beside the repository (../shared/data/raw) unless told otherwise.
DATA_DIR = Path(os.environ.get("TRUSTMARGIN_DATA")
                or Path(__file__).resolve().parents[2] / "shared" / "data" / "raw")


def test_both_file_formats_and_alias_forms(tmp_path: Path) -> None:
    path = tmp_path / "qs.json"
    path.write_text(json.dumps([
        {"test_id": 5, "question": " Who? ", "answer": "Ann"},
        {"test_id": 6, "question": "Where?", "answer": ["Paris", "Paris, France"],
         "passages": ["p0", {"title": "T", "text": "p1"}], "type": "comparison"},
    ]), encoding="utf-8")
    first, second = load_examples(path, dataset="mine")
    assert (first.id, first.question, first.answers, first.passages) == ("5", "Who?", ("Ann",),
                                                                        None)
    assert second.answers == ("Paris", "Paris, France")
    assert second.passages is not None
    assert [p.as_context() for p in second.passages] == ["p0", "T: p1"]
    assert second.meta == {"type": "comparison"} and second.dataset == "mine"


@pytest.mark.parametrize("record,field", [
    ({"test_id": 1, "answer": "x"}, "qs.json[0].question"),
    ({"test_id": 1, "question": "q", "answer": 3}, "qs.json[0].answer"),
    ({"test_id": 1, "question": "q", "answer": []}, "qs.json[0].answer"),
    ({"test_id": 1, "question": "q", "answer": "a", "passages": "text"}, "qs.json[0].passages"),
])
def test_malformed_records_name_the_field(tmp_path: Path, record: dict, field: str) -> None:
    path = tmp_path / "qs.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    with pytest.raises(InvalidInputError) as info:
        load_examples(path)
    assert info.value.field == field


def test_named_datasets_read_the_shared_files_in_id_order() -> None:
    assert (DATA_DIR / "prag").is_dir(), f"set TRUSTMARGIN_DATA (looked in {DATA_DIR})"
    cwq = load_dataset("cwq", DATA_DIR)
    assert [e.id for e in cwq] == [str(i) for i in range(200)]
    assert all(e.passages is not None and len(e.passages) == 3 for e in cwq)
    wiki = load_dataset("2wiki", DATA_DIR)
    assert len(wiki) == 480 and len({e.id for e in wiki}) == 480
    ids = [int(e.id) for e in wiki]
    assert ids == sorted(ids)
    assert {e.meta["type"] for e in wiki} == {"compositional", "comparison"}


@pytest.mark.parametrize("args,message", [
    (["eval", "--dataset", "no-such-file.json"], "no-such-file.json does not exist"),
    (["eval", "--dataset", "cwq"], "data_dir: is required"),
    (["eval", "--batch-size", "0", "--dataset", "cwq"], "--batch-size: must be >= 1"),
    (["eval", "--noise-levels", "0,7", "--top-k", "3"], "--noise-levels"),
    (["report", "/nonexistent/run"], "holds no manifest.json"),
])
def test_bad_cli_input_is_a_clear_error_before_any_model_load(
    args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRUSTMARGIN_DATA", raising=False)
    result = run_main(*args)
    assert result.exit_code == 2
    assert message in result.output


def test_pipeline_subset_takes_each_question_type_in_turn() -> None:
    """2Wiki's ids interleave its types unevenly; a short pipeline run takes them in turn."""
    wiki = load_dataset("2wiki", DATA_DIR)

    def kind(e: EvalExample) -> str:
        return e.meta["type"]

    chosen = first_of_each_type(wiki, 6, kind)
    assert [kind(e) for e in chosen] == ["compositional", "comparison"] * 3
    by_type = {t: [e for e in wiki if kind(e) == t] for t in ("compositional", "comparison")}
    assert [e.id for e in chosen[::2]] == [e.id for e in by_type["compositional"][:3]]
    assert [e.id for e in chosen[1::2]] == [e.id for e in by_type["comparison"][:3]]
    assert first_of_each_type(wiki, None, kind) == list(wiki)
    cwq = load_dataset("cwq", DATA_DIR)  # one type: the plain head
    assert first_of_each_type(cwq, 5, lambda e: e.meta.get("type", "")) == list(cwq[:5])
