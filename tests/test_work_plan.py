"""Long work states its plan first (issue 35, item 7): ``trustmargin check`` on a large labeled
file asks for ``--yes`` or ``--limit`` before any model loads, and every check prints its
questions, batches and estimated time from a timed first batch before the rest.

The large file is generated (10,000 questions, passages in each record); nothing past the
refusal runs on it. The plan is run on the real embedded SmolLM2 (the session's model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import DEMO, run_main

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.evaluation.work_plan import LARGE_RUN_QUESTIONS


def write_large(path: Path, extra: int, first: list[dict[str, object]] | None = None) -> Path:
    """A labeled JSONL file: ``first`` records, then ``extra`` generated distinct questions
    with one passage each."""
    records = list(first or []) + [
        {"id": f"g{n}", "question": f"What is the code of depot {n}?", "answer": f"D-{n}",
         "passages": [{"title": f"Depot {n}", "text": f"Depot {n} has code D-{n}."}]}
        for n in range(extra)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model fails the test: the refusal must come before it."""
    from trustmargin_integrations.backends.hf import HFBackend

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(HFBackend, "load", staticmethod(refuse))


def test_a_large_check_without_yes_or_limit_is_refused_before_the_model(
        tmp_path: Path, no_model_load: None) -> None:
    # main: generated (a 13-hour run); now one line naming --yes and --limit, no model.
    big = write_large(tmp_path / "big.jsonl", 10_000)
    result = run_main("check", str(big), "--model", "smollm2-135m")
    assert result.exit_code == 2, result.output
    line, = result.output.strip().splitlines()
    assert line.startswith("error --yes: 10,000 questions is more than the 1,000"), line
    assert "--limit N" in line and "Fix:" in line
    assert not (tmp_path / "big.jsonl.check").exists()  # nothing written either


def test_the_threshold_is_the_documented_one(tmp_path: Path, no_model_load: None) -> None:
    assert LARGE_RUN_QUESTIONS == 1_000
    # One question more than the threshold asks; a bad --limit is refused as an option.
    over = write_large(tmp_path / "over.jsonl", LARGE_RUN_QUESTIONS + 1)
    assert run_main("check", str(over)).output.startswith("error --yes:")
    zero = run_main("check", str(over), "--limit", "0")
    assert zero.exit_code == 2 and zero.output.startswith("error --limit:"), zero.output


@pytest.mark.slow
def test_the_plan_is_printed_before_the_work_and_the_probe_is_kept(
        tm: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    demo = {q["id"]: q for q in json.loads((DEMO / "questions.json").read_text())}
    first = [{"id": i, "question": demo[i]["question"], "answers": demo[i]["answers"],
              "passages": [{"title": "Note", "text": demo[i]["answers"][0]}]}
             for i in ("q02", "q04", "q11", "q14")]
    # 1,204 questions: --limit 4 is the user's choice of size, so nothing is asked.
    labeled = write_large(tmp_path / "mine.jsonl", 1_200, first)
    result = run_main("check", str(labeled), "--limit", "4", "--folds", "2", "--batch-size",
                      "2", "--resamples", "300")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    assert lines[plan].startswith("plan: 4 questions in 2 batch(es) of 2; the first batch "
                                  "took "), lines[plan]
    assert "answered and scored), so about " in lines[plan] and "for the other 2" in lines[plan]
    done = next(i for i, line in enumerate(lines) if " computed, " in line)
    assert plan < done
    # The probe's two questions were kept, not computed twice or reported as cached.
    assert "mine: 4 computed, 0 from cache" in lines[done], lines[done]
