"""The files a user gives (labeled questions, corpora, ``score`` input, policy files) are
read as written: a JSONL line is split on ``\\n`` only, so a raw U+2028, U+2029, U+0085 or
form feed inside a JSON string stays in the string (``str.splitlines`` cut the record in
two and refused it); a UTF-8 byte-order mark is accepted (it was refused as invalid JSON);
``.JSONL`` is JSON Lines like ``.jsonl`` (the corpus reader parsed it as one JSON document).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_main

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.retrieval.corpus import load_corpus
from trustmargin_integrations.score_file import read_records

BOM = b"\xef\xbb\xbf"
SEPARATORS = "\u2028\u2029\u0085\x0c\x1c\x1d\x1e"  # every str.splitlines break except \n, \r


def _jsonl(path: Path, records: list[dict[str, object]], *, bom: bool = False) -> Path:
    # ensure_ascii=False: the separators are written raw, as many exporters write them.
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    path.write_bytes((BOM if bom else b"") + text.encode("utf-8"))
    return path


def test_line_separators_inside_strings_stay_in_the_record(tmp_path: Path) -> None:
    question = f"Who{SEPARATORS}wrote Hamlet?"
    labeled = _jsonl(tmp_path / "q.jsonl", [
        {"id": "a", "question": question, "answer": "Shakespeare", "passages": ["Hamlet."]},
        {"id": "b", "question": "Where?", "answer": "Paris", "passages": ["Paris."]}])
    first, second = load_examples(labeled)
    assert (first.id, first.question, second.id) == ("a", question, "b")
    corpus = _jsonl(tmp_path / "c.jsonl", [{"title": "T", "text": f"Paris{SEPARATORS}France"},
                                           {"title": "U", "text": "Lyon"}])
    assert [p.text for p in load_corpus(corpus)] == [f"Paris{SEPARATORS}France", "Lyon"]
    # Windows line ends still work.
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(b'{"title": "T", "text": "a"}\r\n{"title": "U", "text": "b"}\r\n')
    assert [p.text for p in load_corpus(crlf)] == ["a", "b"]


def test_a_byte_order_mark_is_accepted_by_every_reader(tmp_path: Path) -> None:
    record = {"id": "a", "question": "Who wrote Hamlet?", "answer": "Shakespeare",
              "passages": ["Hamlet is a play."]}
    assert len(load_examples(_jsonl(tmp_path / "q.jsonl", [record, record], bom=True))) == 2
    listed = tmp_path / "q.json"
    listed.write_bytes(BOM + json.dumps([record]).encode("utf-8"))
    assert load_examples(listed)[0].question == "Who wrote Hamlet?"
    corpus = tmp_path / "c.json"
    corpus.write_bytes(BOM + json.dumps([{"title": "T", "text": "Paris."}]).encode("utf-8"))
    assert load_corpus(corpus)[0].text == "Paris."
    assert load_corpus(_jsonl(tmp_path / "c.jsonl", [{"text": "Lyon."}], bom=True))[0].text \
        == "Lyon."
    candidates = _jsonl(tmp_path / "in.jsonl", [{"question": "Who?", "passages": ["p"],
                                                 "direct_answer": "a", "rag_answer": "b"}],
                        bom=True)
    assert len(read_records(candidates, {"model": "m"})) == 1
    # A mark anywhere else is text, and the strict reader still names the line.
    late = tmp_path / "late.jsonl"
    late.write_bytes(b'{"text": "a"}\n' + BOM + b'{"text": "b"}\n')
    with pytest.raises(InvalidInputError) as err:
        load_corpus(late)
    assert err.value.field == f"{late}:2"


def test_an_upper_case_jsonl_extension_is_json_lines(tmp_path: Path) -> None:
    corpus = _jsonl(tmp_path / "corpus.JSONL", [{"title": "A", "text": "Paris is in France."},
                                                {"title": "B", "text": "Lyon is too."}])
    assert [p.title for p in load_corpus(corpus)] == ["A", "B"]
    run = run_main("index", "--corpus", str(corpus), "--out", str(tmp_path / "idx"))
    assert run.exit_code == 0 and "indexed 2 passages" in run.output, run.output


def test_a_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b'{"text": "a"}\n{"text": "\xe9t\xe9"}\n')
    with pytest.raises(InvalidInputError, match="is not UTF-8 text") as err:
        load_corpus(corpus)
    assert err.value.field == f"{corpus}:2"
