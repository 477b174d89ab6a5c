"""Repeated questions cannot fake a verdict: ``trustmargin check`` and ``trustmargin
calibrate`` count each distinct question once (same text, ignoring case, spacing and end
punctuation, whatever its id), collapse the copies with a warning, so a question never sits
on both sides of a fold or of the hold-out split, and refuse what they cannot use (too few
questions, repeated ids under ``--holdout``, records without passages) before generating.

Before: six distinct questions gave "not significant" with the small-sample warning; the same
six repeated 1,000 times gave "Keep TrustMargin ... on your 6000 questions +16.7 F1 [+15.7,
+17.6]" without it, and under ``--holdout`` the copies of one question were fitted on and
held out at once.

The runs are real: eight of the project's demo questions with their BM25 passages, answered
and scored by the embedded SmolLM2 through the evaluation runner (the copies share one cached
result, so only the distinct texts are computed).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_support import run_main
from run_support import forbid_model_load

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.calibrate_command import calibrate_run
from trustmargin_integrations.evaluation.check_command import check_run

QUESTIONS = ("q00", "q02", "q04", "q05", "q09", "q11", "q14", "q16")
COPIES = 150


def _variant(question: str) -> str:
    """The same question as another export writes it: case, spacing, no question mark."""
    return "  " + question.lower().replace(" ", "  ").rstrip("?") + " "


@pytest.fixture(scope="module")
def rows() -> list[dict[str, object]]:
    """The eight distinct labeled questions with their BM25 top-3 demo passages."""
    from trustmargin_integrations.demo import demo_corpus, demo_questions
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    index = BM25Index.build(demo_corpus())
    questions = {q.id: q for q in demo_questions()}
    return [{"test_id": f"d{i}", "question": q.question, "answer": q.answers,
             "passages": [{"title": p.title, "text": p.text}
                          for p in index.search(q.question, 3)]}
            for i, q in enumerate(questions[k] for k in QUESTIONS)]


def _run(tm: TrustMargin, folder: Path, rows: list[dict[str, object]]) -> Path:
    from trustmargin_integrations.evaluation.datasets import load_examples
    from trustmargin_integrations.evaluation.rundir import open_store, record_dataset
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages, run_eval

    data = folder / "demo8.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    run_dir = folder / "run"
    records = run_eval(tm, load_examples(data), open_store(run_dir),
                       source=PrecomputedPassages(), top_k=3, batch_size=4, progress=False)
    record_dataset(run_dir, "demo8", records, {"retrieval": "precomputed", "top_k": 3})
    return run_dir


@pytest.fixture(scope="module")
def runs(tm: TrustMargin, rows: list[dict[str, object]],
         tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the eight distinct questions, the same eight repeated: 150 exact copies of each under
    other ids and a rewritten copy of two) as two real run directories."""
    distinct = _run(tm, tmp_path_factory.mktemp("distinct"), rows)
    repeated_rows = (rows
                     + [{**r, "test_id": f"c{j}-{i}"} for j in range(COPIES)
                        for i, r in enumerate(rows)]
                     + [{**r, "test_id": f"n{i}", "question": _variant(str(r["question"]))}
                        for i, r in enumerate(rows[:2])])
    folder = tmp_path_factory.mktemp("repeated")
    (folder / "run").mkdir()
    # The distinct run's cache: only the two rewritten questions are computed again.
    shutil.copy(distinct / "cache.jsonl", folder / "run" / "cache.jsonl")
    return distinct, _run(tm, folder, repeated_rows)


@pytest.mark.slow
def test_copies_do_not_change_the_verdict(runs: tuple[Path, Path]) -> None:
    distinct, repeated = runs
    kwargs = {"folds": 2, "resamples": 500}
    alone, _ = check_run(distinct, **kwargs)  # type: ignore[arg-type]
    copied, _ = check_run(repeated, **kwargs)  # type: ignore[arg-type]
    assert copied.n == 8 and copied.sizes == {"demo8": 8}
    assert copied.small_sample and "Small sample" in copied.verdict
    assert "on your 8 questions" in copied.verdict
    assert copied.model_dump() == alone.model_dump()  # verdict, candidates, nested estimate
    assert all(f.n_train + f.n_test == 8 for f in copied.nested.folds)


@pytest.mark.slow
def test_copies_never_sit_on_both_sides_of_the_holdout(runs: tuple[Path, Path]) -> None:
    from trustmargin_integrations.evaluation.distinct import question_key

    distinct, repeated = runs
    kwargs = {"folds": 2, "resamples": 300, "holdout": 0.5}
    _, alone = check_run(distinct, **kwargs)  # type: ignore[arg-type]
    _, copied = check_run(repeated, **kwargs)  # type: ignore[arg-type]
    assert copied.fitted_on.n == 4 and copied.held_out is not None
    assert copied.held_out.n == 4
    assert copied.fitted_on.question_ids == alone.fitted_on.question_ids
    # The fitted ids are four distinct questions, the held-out ones the other four.
    texts = {f"demo8:d{i}": question_key(str(r["question"]))
             for i, r in enumerate(json.loads((distinct.parent / "demo8.json").read_text()))}
    assert len({texts[i] for i in copied.fitted_on.question_ids}) == 4


@pytest.mark.slow
def test_calibrate_fits_on_distinct_questions(runs: tuple[Path, Path]) -> None:
    distinct, repeated = runs
    alone, _ = calibrate_run(distinct, folds=2, resamples=300)
    copied, cv = calibrate_run(repeated, folds=2, resamples=300)
    assert copied.fitted_on.n == 8 and cv is not None and cv.bootstrap.n == 8
    # The same fitted rule (its kind, lambda_bind and tau) whether questions repeat or not.
    assert copied.policy.record() == alone.policy.record()
    assert copied.policy.kind == "rule"


@pytest.mark.slow
def test_the_commands_warn_and_name_the_copies(runs: tuple[Path, Path]) -> None:
    _, repeated = runs
    for command in (["check", str(repeated), "--folds", "2", "--resamples", "300",
                     "--out", str(repeated.parent / "policy.json")],
                    ["calibrate", str(repeated), "--folds", "2", "--resamples", "300",
                     "--out", str(repeated.parent / "cal.json")]):
        run = run_main(*command)
        assert run.exit_code == 0, run.output
        warning = next(line for line in run.output.splitlines() if line.startswith("warning"))
        assert f"{8 * COPIES + 2} of {8 * COPIES + 10} labeled questions repeat" in warning
        assert "'demo8:c0-0' = 'demo8:d0'" in warning and "leaving 8 questions" in warning


def test_near_duplicates_are_one_question() -> None:
    from trustmargin_integrations.evaluation.distinct import Distinct, question_key

    assert question_key("Who wrote Hamlet?") == question_key("  who WROTE\u200b  hamlet ")
    assert question_key("Ｗho wrote Hamlet?") == question_key("who wrote hamlet")  # NFKC
    assert question_key("What is 5-3?") != question_key("What is 5+3?")
    found = Distinct.of(["Who?", "What?", "who", "Where?", "WHAT ?"])
    assert found.kept == [0, 1, 3] and found.copies == {2: 0, 4: 1}


def _labeled(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _refused_before_loading(monkeypatch: pytest.MonkeyPatch, labeled: Path, *options: str
                            ) -> str:
    forbid_model_load(monkeypatch)
    run = run_main("check", str(labeled), *options)
    assert run.exit_code == 2, run.output
    error = next(line for line in run.output.splitlines() if line.startswith("error"))
    assert not labeled.with_name(labeled.name + ".check").exists()  # nothing generated
    return error


def test_too_few_distinct_questions_are_refused_before_generating(
        monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]], tmp_path: Path) -> None:
    three = _labeled(tmp_path / "three.jsonl",
                     [{**r, "test_id": f"{j}-{i}"} for j in range(10) for i, r in
                      enumerate(rows[:3])])
    error = _refused_before_loading(monkeypatch, three, "--folds", "2")
    assert error.startswith(f"error LABELED {three}:")
    assert "3 distinct labeled questions are too few for 2-fold" in error
    # After the hold-out too: 8 questions, half held out, leave 4 < 2 x 3 folds.
    eight = _labeled(tmp_path / "eight.jsonl", rows)
    error = _refused_before_loading(monkeypatch, eight, "--folds", "3", "--holdout", "0.5")
    assert "4 distinct labeled questions are too few for 3-fold" in error
    assert "--folds 2" in error  # the refusal names the option that fits 4 questions


def test_repeated_ids_under_holdout_are_refused_before_generating(
        monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]], tmp_path: Path) -> None:
    clash = _labeled(tmp_path / "clash.jsonl",
                     [{**r, "test_id": "same" if i < 2 else f"d{i}"} for i, r in enumerate(rows)])
    error = _refused_before_loading(monkeypatch, clash, "--folds", "2", "--holdout", "0.5")
    assert "holds the id 'same' more than once" in error


def test_blank_passages_are_refused_before_the_model_loads(
        monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]], tmp_path: Path) -> None:
    """Before: refused after the model loaded, with a fix naming ``--retrieval`` (an
    option ``check`` does not have)."""
    blank = _labeled(tmp_path / "blank.jsonl",
                     [{**r, "passages": ["   ", "\t"]} if i == 5 else r
                      for i, r in enumerate(rows)])
    error = _refused_before_loading(monkeypatch, blank, "--folds", "2")
    assert "blank[d5].passages: are missing or all blank" in error
    assert "--corpus" in error and "--retrieval" not in error


@pytest.mark.slow
def test_check_answers_each_distinct_question_once(
        tm: TrustMargin, monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, object]],
        runs: tuple[Path, Path], tmp_path: Path) -> None:
    """The copies are collapsed before generation: the run directory holds the four distinct
    questions (answered from the distinct run's cache, so no model time is spent here)."""
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    (tmp_path / "mine.jsonl.check").mkdir()
    shutil.copy(runs[0] / "cache.jsonl", tmp_path / "mine.jsonl.check" / "cache.jsonl")
    labeled = _labeled(tmp_path / "mine.jsonl",
                       rows[:4] + [{**r, "test_id": f"x{i}"} for i, r in enumerate(rows[:4])]
                       + [{**rows[0], "test_id": "y", "question": _variant(
                           str(rows[0]["question"]))}])
    run = run_main("check", str(labeled), "--folds", "2", "--resamples", "300")
    assert run.exit_code == 0, run.output
    assert "5 of 9 labeled questions repeat an earlier one" in run.output
    assert "mine: 4 questions" in run.output and "on your 4 questions" in run.output
    assert "0 computed, 4 from cache" in run.output
    manifest = json.loads((tmp_path / "mine.jsonl.check" / "manifest.json").read_text())
    assert [e["id"] for e in manifest["datasets"]["mine"]["examples"]] == [
        "d0", "d1", "d2", "d3"]


def test_the_library_refuses_repeated_ids_before_fitting(tmp_path: Path) -> None:
    from trustmargin_integrations.evaluation.check_command import check_plan

    with pytest.raises(InvalidInputError, match="'a' more than once") as err:
        check_plan(["x"] * 8, ["a", "b", "c", "d", "e", "f", "g", "a"], folds=2, holdout=0.5,
                   split_seed=0, where="mine.jsonl")
    assert err.value.field == "mine.jsonl"
    check_plan(["x"] * 8, list("abcdefga"), folds=2, holdout=0.0, split_seed=0)
