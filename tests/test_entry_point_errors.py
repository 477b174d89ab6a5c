"""Every entry point refuses a bad argument with a typed error naming it, before any work,
and prints it as one line in time linear in its length.

Before: ``tm.decide(None)`` was an AttributeError, an Evidence with ``scores=None`` a bare
AssertionError, ``from_pretrained(config=5)`` an AttributeError, ``from_pretrained(foo=1)``
a TypeError from ``HFBackend.load``, ``from_pretrained("a" * 5000)`` "OSError: File name too
long"; ``check --seed -1`` a numpy ValueError after the model load; ``--concurrency 0`` click's
boxed message, ``--concurrency 100000000000000000000`` accepted; a 100,000-character model
name in ``--backend`` took minutes in rich's highlighter.
"""

from __future__ import annotations

import dataclasses
import io
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import DEMO, run_main, write_labeled
from rich.console import Console

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.arbiter.decision import Evidence
from trustmargin_integrations.cli.boundary import report
from trustmargin_integrations.errors import InvalidInputError

INPUT = {"question": "Who designed the Eiffel Tower?",
         "passages": ["The tower was designed by the engineer Gustave Eiffel's company."],
         "direct_answer": "Gustave Eiffel", "rag_answer": "Maurice Koechlin"}


@pytest.fixture(scope="module")
def evidence(tm: TrustMargin) -> Evidence:
    """The scored evidence of one question whose two answers differ (so it is scored)."""
    scored = tm.score_batch([INPUT])[0]
    assert scored.scores is not None and scored.plan.verdict is None
    return scored


def test_decide_names_what_is_not_evidence(tm: TrustMargin, evidence: Evidence) -> None:
    decision = tm.decide(evidence)
    for bad in (None, {}, "x", [evidence], decision):
        with pytest.raises(InvalidInputError, match=r"^evidence: a \w+ is not a Evidence"):
            tm.decide(bad)  # type: ignore[arg-type]


def test_evidence_without_its_scores_is_named(tm: TrustMargin, evidence: Evidence) -> None:
    with pytest.raises(InvalidInputError, match=r"^evidence\.scores: must be a list"):
        tm.decide(dataclasses.replace(evidence, scores=None))
    with pytest.raises(InvalidInputError, match=r"^evidence\.scores: holds 1 likelihoods"):
        tm.decide(dataclasses.replace(evidence, scores=(evidence.scores or [])[:1]))


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"config": 5}, "config"),
    ({"foo": 1}, "foo"),
    ({"model": "a" * 5000}, "model"),
    ({"model": "a" * 300}, "model"),
    ({"model": "openai:http://127.0.0.1:1/v1#" + "m" * 5000}, "model"),
])
def test_from_pretrained_names_the_argument(kwargs: dict[str, Any], field: str) -> None:
    started = time.perf_counter()
    with pytest.raises(InvalidInputError) as err:
        TrustMargin.from_pretrained(**kwargs)
    assert err.value.field == field, err.value
    assert len(str(err.value)) < 1000  # a long value is cut in the message
    assert time.perf_counter() - started < 30  # refused, not loaded (a generous bound)


@pytest.fixture(scope="module")
def labeled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ids = [f"q0{i}" for i in range(6)]
    return write_labeled(tmp_path_factory.mktemp("labeled") / "six.jsonl", ids)


@pytest.mark.parametrize(("args", "field"), [
    (["--seed", "-1"], "--seed"),
    (["--split-seed", "-5"], "--split-seed"),
    (["--seed", str(2**32)], "--seed"),
    (["--concurrency", "0"], "--concurrency"),
    (["--top-k", "x"], "--top-k"),
    (["--concurrency", "100000000000000000000", "--backend",
      "openai:http://127.0.0.1:1/v1#smollm2-135m"], "--concurrency"),
])
def test_check_refuses_a_bad_number_in_one_line_before_the_model(args: list[str], field: str,
                                                                 labeled: Path) -> None:
    run = run_main("check", str(labeled), *args)
    assert run.exit_code == 2, run.output
    lines = run.output.strip().splitlines()
    assert lines == [lines[0]] and lines[0].startswith(f"error {field}: "), run.output
    assert not (labeled.parent / "six.jsonl.check").exists()  # nothing was generated


@pytest.mark.parametrize(("args", "field"), [(["--seed", "-5"], "--seed"),
                                             (["--split-seed", "-5"], "--split-seed")])
def test_calibrate_refuses_a_negative_seed(args: list[str], field: str, tmp_path: Path) -> None:
    run = run_main("calibrate", str(tmp_path), *args)
    assert run.exit_code == 2 and run.output.startswith(f"error {field}: "), run.output


def test_eval_refuses_a_negative_noise_seed() -> None:
    run = run_main("eval", "--noise-seed", "-1", "--limit", "1")
    assert run.exit_code == 2 and run.output.startswith("error --noise-seed: "), run.output


@pytest.mark.parametrize("size", [20_000, 100_000])
def test_a_huge_value_prints_as_one_short_line_at_once(size: int) -> None:
    """The message of a 100,000-character model name is cut and printed without the regex
    highlighter (before: 15.6 s at 20,000 characters, over 180 s at 100,000)."""
    name = "x" * size
    with pytest.raises(InvalidInputError) as err:
        TrustMargin.from_pretrained(f"openai:http://127.0.0.1:1/v1#{name}")
    long = InvalidInputError("--backend", f"no model {name!r} (" + "1.5, " * size + ")",
                             "pass a shorter name")
    for exc in (err.value, long):
        out = io.StringIO()
        started = time.perf_counter()
        report(exc, Console(file=out, width=80, force_terminal=True, color_system="truecolor"))
        assert time.perf_counter() - started < 5, size
        text = out.getvalue()
        assert text.count("\n") == 1 and len(text) < 3000, len(text)
        assert "Fix: pass" in text


def test_the_backend_option_with_a_huge_model_name_is_one_line() -> None:
    run = run_main("ask", "Who?", "--corpus", str(DEMO / "corpus.json"),
                   "--backend", "hf:" + "y" * 100_000)
    assert run.exit_code == 2, run.output[:300]
    assert run.output.startswith("error --backend: the model name ") and \
        len(run.output) < 3000, run.output[:300]
