"""``trustmargin check`` on a user's chain's own answers: labeled records that carry the
chain's two chat answers (``direct_answer`` from the chain run without retrieval,
``rag_answer`` with it) are arbitrated as given texts under the scoring form, graded whole,
and the policy file says, and applies, how they were compared. Real embedded SmolLM2, real
BM25 over the demo corpus; the chat texts are written here the way chains frame answers (the
same lead-in on both sides, one of them wrong), since generating them would only slow the test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_main

import trustmargin_integrations
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.calibrate_command import LoadedRun
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.evaluation.metrics import contains_gold, token_f1
from trustmargin_integrations.policy_file import PolicyFile
from trustmargin_integrations.rule.replay import replay

DEMO = Path(trustmargin_integrations.__file__).parent / "demo_data"
IDS = ("q00", "q01", "q02", "q04", "q11", "q14")


def _chat(answer: str) -> str:
    return f"Hello! Thanks for asking.\n\nThe answer is **{answer}**. Let me know if you need more."


def _labeled(path: Path) -> list[dict[str, object]]:
    questions = {q["id"]: q for q in json.loads((DEMO / "questions.json").read_text())}
    records = []
    for n, ident in enumerate(IDS):
        q = questions[ident]
        wrong = questions[IDS[(n + 1) % len(IDS)]]["answers"][0]
        right = q["answers"][0]
        # Half the questions: the RAG run is right; the other half: the closed-book run.
        direct, rag = (wrong, right) if n % 2 == 0 else (right, wrong)
        records.append({"id": ident, "question": q["question"], "answers": q["answers"],
                        "direct_answer": _chat(direct), "rag_answer": _chat(rag)})
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return records


def test_chain_answers_load_and_half_given_is_refused(tmp_path: Path) -> None:
    records = _labeled(tmp_path / "chain.jsonl")
    first = load_examples(tmp_path / "chain.jsonl")[0]
    assert first.chain is not None
    assert (first.chain.direct, first.chain.rag) == (records[0]["direct_answer"],
                                                   records[0]["rag_answer"])
    half = tmp_path / "half.jsonl"
    half.write_text(json.dumps({"question": "Who?", "answer": "Ada",
                                "direct_answer": "Ada."}) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as err:
        load_examples(half)
    assert err.value.field == "half.jsonl:1.rag_answer"
    half.write_text(json.dumps({"question": "Who?", "answer": "Ada", "direct_answer": "Ada.",
                                "rag_answer": ["Ada"]}) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not text") as err:
        load_examples(half)
    assert err.value.field == "half.jsonl:1.rag_answer"


def test_mixed_records_and_a_form_without_chain_answers_are_refused(tmp_path: Path) -> None:
    records = _labeled(tmp_path / "chain.jsonl")
    mixed = tmp_path / "mixed.jsonl"
    plain = {k: v for k, v in records[1].items() if k not in ("direct_answer", "rag_answer")}
    mixed.write_text("".join(json.dumps(r) + "\n" for r in (records[0], plain, *records[2:])),
                     encoding="utf-8")
    result = run_main("check", str(mixed), "--corpus", str(DEMO / "corpus.json"),
                      "--folds", "2")
    assert result.exit_code == 2 and "record 2" in result.output, result.output
    assert not (tmp_path / "mixed.jsonl.check").exists()
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps(plain) + "\n", encoding="utf-8")
    result = run_main("check", str(bare), "--corpus", str(DEMO / "corpus.json"),
                      "--scoring-form", "extract", "--folds", "2")
    assert result.exit_code == 2 and "--scoring-form" in result.output, result.output
    result = run_main("check", str(tmp_path / "chain.jsonl"), "--scoring-form", "first")
    assert result.exit_code == 2 and "--scoring-form" in result.output, result.output


@pytest.mark.slow
def test_check_runs_on_a_chains_answers_and_says_how_they_were_compared(
        tm: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    # The session's embedded model: `check --model smollm2-135m` must not load it twice.
    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    records = _labeled(tmp_path / "chain.jsonl")
    args = ["check", str(tmp_path / "chain.jsonl"), "--corpus", str(DEMO / "corpus.json"),
            "--folds", "2", "--resamples", "300"]
    result = run_main(*args)
    assert result.exit_code == 0, result.output
    assert "your chain's own (direct_answer, rag_answer), compared under scoring form " \
           "'auto' and graded whole" in " ".join(result.output.split())
    run_dir = tmp_path / "chain.jsonl.check"
    policy = PolicyFile.load(run_dir / "policy.json")
    assert policy.scoring_form == "auto"  # the default form, recorded by name
    # Loading the policy compares a chain's texts the way the check did.
    calibrated = TrustMargin.calibrated(tm.backend, run_dir / "policy.json")
    assert calibrated.config.scoring_form == "auto"

    loaded = LoadedRun.read(run_dir)
    scored = loaded.scored["chain"]
    assert len(scored) == len(records)
    by_id = {r["id"]: r for r in records}
    for s in scored:
        record = by_id[str(s.decision.id).split(":", 1)[1]]
        d = s.decision
        # Same lead-in and closing on both sides: the differing answers were compared, never
        # the shared framing, and the two texts are never reported as agreeing. Short framed
        # answers that do not restate the question are compared by difference under auto.
        assert d.scoring_form == "differential" and d.source != "agree"
        assert d.rag_answer in record["rag_answer"] and "Hello" not in d.rag_answer
        # Graded whole: the text the chain returns, not the compared words.
        assert s.f1_rag == token_f1(str(record["rag_answer"]), record["answers"])
        assert s.f1_direct == token_f1(str(record["direct_answer"]), record["answers"])
    # Resumed from the cache: nothing is scored again.
    again = run_main(*args)
    assert again.exit_code == 0 and "0 computed" in again.output, again.output


@pytest.mark.slow
def test_check_by_gold_stated_grades_each_chosen_text_by_its_gold_answer(
        tm: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--objective contains``: the table's numbers are the share of chosen chat texts that
    state a gold answer, recomputed here by hand from the run's own decisions (token F1 of
    these texts is diluted by the framing, EM is 0, so neither would say which side is right)."""
    from trustmargin_integrations.backends.hf import HFBackend

    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    records = _labeled(tmp_path / "chain.jsonl")
    result = run_main("check", str(tmp_path / "chain.jsonl"), "--corpus",
                      str(DEMO / "corpus.json"), "--folds", "2", "--resamples", "300",
                      "--objective", "contains")
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "objective: gold stated, whether the text states a gold answer" in shown
    verdict = next(line for line in result.output.splitlines()
                   if line.startswith(("Keep ", "Use ")))
    assert " gold stated [" in verdict, verdict

    run_dir = tmp_path / "chain.jsonl.check"
    by_id = {r["id"]: r for r in records}
    chosen: dict[str, list[dict[str, object]]] = {"paper": [], "rag": [], "direct": []}
    for s in LoadedRun.read(run_dir).scored["chain"]:
        record = by_id[str(s.decision.id).split(":", 1)[1]]
        chosen["paper"].append({"text": record[f"{replay(s.decision)}_answer"], **record})
        chosen["rag"].append({"text": record["rag_answer"], **record})
        chosen["direct"].append({"text": record["direct_answer"], **record})

    def by_hand(metric: Callable[..., float], side: str) -> float:
        return 100 * sum(metric(str(r["text"]), r["answers"]) for r in chosen[side]) / len(
            chosen[side])

    rows = {line.strip(" *").split("  ")[0]: line for line in result.output.splitlines()
            if line.startswith((" *", "  "))}
    for label, side in (("TrustMargin (paper: lambda 0.5, tau -1.5)", "paper"),
                        ("always-RAG", "rag"), ("always-Direct", "direct")):
        stated = re.search(r"gold stated\s+(\d+\.\d+)", rows[label])
        f1 = re.search(r"F1\s+(\d+\.\d+)", rows[label])
        assert stated and f1 and "EM" not in rows[label], rows[label]
        assert float(stated[1]) == pytest.approx(by_hand(contains_gold, side), abs=0.005)
        assert float(f1[1]) == pytest.approx(by_hand(token_f1, side), abs=0.005)
    # The framing dilutes F1; the gold answer is stated in half the texts of each side.
    assert by_hand(contains_gold, "rag") == by_hand(contains_gold, "direct") == 50.0
    assert by_hand(token_f1, "rag") < 20.0

    policy = PolicyFile.load(run_dir / "policy.json")
    assert policy.objective == "contains" and policy.evidence is not None
    assert policy.evidence["objective"] == "contains"
    assert policy.evidence["candidates"]["paper"]["contains"]["mean"] == pytest.approx(
        by_hand(contains_gold, "paper"))
