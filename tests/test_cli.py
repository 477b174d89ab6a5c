"""The `trustmargin` command end to end on the embedded model (in-process, real model)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trustmargin_integrations.cli import app
from trustmargin_integrations.demo import demo_corpus

runner = CliRunner()


def test_help_lists_every_command() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "ask", "score", "index", "models"):
        assert command in result.output


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "decisions.jsonl"
    result = runner.invoke(app, ["demo", "--limit", "2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "Summary over 2 questions" in result.output and "trustmargin" in result.output
    decisions = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(decisions) == 2 and all(d["source"] in ("direct", "rag", "agree")
                                       for d in decisions)


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


def test_score_resumes_without_recomputing(tmp_path: Path) -> None:
    rows = [{"id": f"c{i}", "question": q, "passages": [p], "direct_answer": d, "rag_answer": r}
            for i, (q, p, d, r) in enumerate([
                ("Who designed the Zelvora Bridge?", "Marta Okonkwo designed the Zelvora Bridge.",
                 "Gustave Eiffel", "Marta Okonkwo"),
                ("What is the capital of Australia?", "Sydney is the largest city in Australia.",
                 "Canberra", "Sydney"),
                ("What is the capital of France?", "Paris is the capital of France.",
                 "Paris", "Paris"),
            ])]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = runner.invoke(app, ["score", "-i", str(src), "-o", str(out), "--batch-size", "2"])
    assert first.exit_code == 0, first.output
    lines = out.read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["c0", "c1", "c2"]
    # Simulate a crash while writing the last record: a torn line at the end.
    out.write_text("\n".join(lines[:2]) + "\n" + lines[2][:25])
    again = runner.invoke(app, ["score", "-i", str(src), "-o", str(out)])
    assert again.exit_code == 0, again.output
    assert "resuming: 2 decisions" in again.output
    resumed = out.read_text().splitlines()
    assert resumed[:2] == lines[:2]  # finished records are kept byte for byte

    def without_timings(line: str) -> dict:
        return {k: v for k, v in json.loads(line).items() if k != "timings"}

    assert [without_timings(x) for x in resumed] == [without_timings(x) for x in lines]


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
