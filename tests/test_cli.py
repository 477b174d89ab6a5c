"""The `trustmargin` command end to end on the embedded model (in-process, real model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trustmargin_integrations.cli import app
from trustmargin_integrations.demo import demo_corpus

runner = CliRunner()


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "ask", "score", "index", "models"):
        assert command in result.output


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "decisions.jsonl"
    result = runner.invoke(app, ["demo", "--limit", "2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "Summary over 2 questions" in result.output and "trustmargin" in result.output
    decisions = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(decisions) == 2 and all(d["source"] in ("direct", "rag", "agree")
                                       for d in decisions)


@pytest.mark.slow
def test_index_then_ask_json(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p.model_dump()) + "\n" for p in demo_corpus()))
    result = runner.invoke(app, ["index", "--corpus", str(corpus), "--out", str(tmp_path / "ix")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["ask", "Who designed the Zelvora Bridge?", "--index",
                                 str(tmp_path / "ix"), "--direct-answer", "Gustave Eiffel",
                                 "--rag-answer", "Marta Okonkwo", "--json"])
    assert result.exit_code == 0, result.output
    decision = json.loads(result.output[result.output.index("{"):])
    assert decision["question"] == "Who designed the Zelvora Bridge?"
    assert decision["m"] is not None and decision["passages_used"] == 3


ROWS = [
    ("Who designed the Zelvora Bridge?", "Marta Okonkwo designed the Zelvora Bridge.",
     "Gustave Eiffel", "Marta Okonkwo"),
    ("What is the capital of Australia?", "Sydney is the largest city in Australia.",
     "Canberra", "Sydney"),
    ("What is the capital of France?", "Paris is the capital of France.", "Paris", "Paris"),
]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _without_timings(line: str) -> dict:
    return {k: v for k, v in json.loads(line).items() if k != "timings"}


@pytest.mark.slow
def test_score_resumes_from_its_store_without_recomputing(tmp_path: Path) -> None:
    rows = [{"id": f"c{i}", "question": q, "passages": [p], "direct_answer": d,
             "rag_answer": r, "gold": d} for i, (q, p, d, r) in enumerate(ROWS)]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(src, rows)
    first = runner.invoke(app, ["score", "-i", str(src), "-o", str(out), "--batch-size", "2"])
    assert first.exit_code == 0, first.output
    assert "3 computed, 0 reused" in first.output
    lines = out.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["c0", "c1", "c2"]
    # Extra keys travel to the decision's metadata, untouched.
    assert [json.loads(x)["metadata"] for x in lines] == [{"gold": r["gold"]} for r in rows]
    # A crash while appending the last result: a torn line at the end of the store.
    cache = tmp_path / "out.jsonl.cache"
    stored = cache.read_text().splitlines()
    assert len(stored) == 3
    cache.write_text("\n".join(stored[:2]) + "\n" + stored[2][:25])
    out.unlink()
    again = runner.invoke(app, ["score", "-i", str(src), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert "2 decisions reused" in again.output and "1 computed, 2 reused" in again.output
    resumed = out.read_text().splitlines()
    assert resumed[:2] == lines[:2]  # reused decisions are byte for byte the same
    assert [_without_timings(x) for x in resumed] == [_without_timings(x) for x in lines]


@pytest.mark.slow
def test_score_keys_on_content_not_ids(tmp_path: Path) -> None:
    """Duplicate, missing and colliding ids cannot lose lines; another tau recomputes."""
    q, p, d, r = ROWS[0]
    rows = [{"question": q, "passages": [p], "direct_answer": d, "rag_answer": r, "id": "x"},
            {"question": q, "passages": [p], "direct_answer": d, "rag_answer": r, "id": "x"},
            {"question": ROWS[1][0], "passages": [ROWS[1][1]], "direct_answer": ROWS[1][2],
             "rag_answer": ROWS[1][3], "id": 1},
            {"question": ROWS[2][0], "passages": [ROWS[2][1]], "direct_answer": ROWS[2][2],
             "rag_answer": ROWS[2][3]}]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write(src, rows)
    first = runner.invoke(app, ["score", "-i", str(src), "-o", str(out)])
    assert first.exit_code == 0, first.output
    ids = [json.loads(x)["id"] for x in out.read_text().splitlines()]
    assert ids == ["x", "x", "1", "4"]  # a missing id is the line number
    assert "3 computed" in first.output  # the duplicate record was scored once
    from trustmargin_integrations.cli import app as cli_app

    tau = runner.invoke(cli_app, ["score", "-i", str(src), "-o", str(out), "--tau", "5"])
    assert tau.exit_code == 0, tau.output
    assert "3 computed, 0 reused" in tau.output
    assert all(json.loads(x)["tau"] == 5.0 for x in out.read_text().splitlines())


def test_score_refuses_unsafe_paths_and_bad_lines_before_loading(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    q, p, d, r = ROWS[0]
    good = {"question": q, "passages": [p], "direct_answer": d, "rag_answer": r}
    _write(src, [good])
    same = runner.invoke(app, ["score", "-i", str(src), "-o", str(src)])
    assert same.exit_code != 0 and "is the input file" in str(same.exception)
    folder = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path)])
    assert folder.exit_code != 0 and "is a directory" in str(folder.exception)
    src.write_text(json.dumps(good) + "\n" + json.dumps({**good, "question": 7}) + "\n")
    bad = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path / "o.jsonl")])
    assert bad.exit_code != 0
    # The record, and the option that gave its file (the CLI boundary adds it).
    assert getattr(bad.exception, "field", "") == f"--input {src}:2.question"
    src.write_bytes(json.dumps(good).encode() + b"\n\xff\xfe\n")
    binary = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path / "o.jsonl")])
    assert getattr(binary.exception, "field", "") == f"--input {src}:2"
    assert not (tmp_path / "o.jsonl").exists()  # nothing was written for a bad input


def test_score_rejects_a_record_without_candidates(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"question": "q?", "passages": ["p"], "direct_answer": "a"}) + "\n")
    result = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code != 0
    assert "rag_answer" in str(result.exception)


def test_retrieval_sources_are_exclusive_and_es_errors_are_clear(tmp_path: Path) -> None:
    both = runner.invoke(app, ["index", "--corpus", "c.json"])
    assert both.exit_code != 0 and "--out/--elasticsearch" in str(both.exception)
    two = runner.invoke(app, ["ask", "q?", "--corpus", "c.json", "--index", "ix"])
    assert two.exit_code != 0 and "exactly one" in str(two.exception)
    # A real connection attempt to a closed loopback port: the error names the server, and
    # the password given in the URL never appears in it.
    down = runner.invoke(app, ["ask", "q?", "--elasticsearch",
                               "http://elastic:s3cret@127.0.0.1:9"])
    assert down.exit_code != 0
    message = str(down.exception)
    assert "127.0.0.1:9" in message and "s3cret" not in message
