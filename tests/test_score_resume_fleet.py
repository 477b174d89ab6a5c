"""``score`` resumes on any fleet of the same model: its results are keyed by what computes
them (the served model, the tokenizer, the settings), as ``check``'s are, not by the URL
list. Before, reordering the fleet, dropping to one member or writing ``/v1`` recomputed
everything (``1 computed, 0 reused``).

The servers are real HTTP servers on 127.0.0.1 (tests/fault_server.py) answering honest
echoes of the real SmolLM2 tokenizer's tokens, each prompt token at -0.5.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_main
from fault_server import Answer, FaultServer, Seen, echo_answer
from test_fault_server import RECORDS

from trustmargin_integrations.backends.openai_compat import load_tokenizer


@pytest.fixture(scope="module")
def servers() -> Iterator[list[FaultServer]]:
    tokenizer = load_tokenizer("smollm2-135m")

    def respond(seen: Seen) -> Answer:
        return echo_answer(tokenizer, seen.body["prompt"])

    started = [FaultServer(respond).start() for _ in range(2)]
    try:
        yield started
    finally:
        for server in started:
            server.stop()


def _score(src: Path, out: Path, *urls: str) -> Any:
    specs = [arg for url in urls
             for arg in ("--backend", f"openai:{url}#model=m&tokenizer=smollm2-135m")]
    return run_main("score", "-i", str(src), "-o", str(out), "--batch-size", "1", *specs)


def test_any_fleet_of_the_model_resumes_the_run(servers: list[FaultServer], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_RETRIES", "0")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    a, b = (server.url for server in servers)
    first = _score(src, out, a, b)
    assert first.exit_code == 0, first.output
    assert "2 computed, 0 reused" in first.output, first.output
    expected = out.read_text()
    asked = sum(len(server.seen) for server in servers)
    for fleet in ([b, a], [a], [b + "/v1"], [a + "/v1/", b]):
        again = _score(src, out, *fleet)
        assert again.exit_code == 0, again.output
        assert "0 computed, 2 reused" in again.output, (fleet, again.output)
        assert out.read_text() == expected
    # Nothing was scored again: the fleets' only requests are their members' load probes.
    later = sum(len(server.seen) for server in servers) - asked
    assert later < asked, (later, asked)


def test_another_model_or_tokenizer_is_not_reused(servers: list[FaultServer],
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTMARGIN_REMOTE_RETRIES", "0")
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(json.dumps(RECORDS[0]) + "\n")
    url = servers[0].url
    assert "1 computed" in _score(src, out, url).output
    other = run_main("score", "-i", str(src), "-o", str(out), "--batch-size", "1",
                     "--backend", f"openai:{url}#model=m2&tokenizer=smollm2-135m")
    assert other.exit_code == 0 and "1 computed, 0 reused" in other.output, other.output
