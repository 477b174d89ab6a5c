"""``trustmargin check`` on a user's chain's own answers: labeled records that carry the
chain's two chat answers (``direct_answer`` from the chain run without retrieval,
``rag_answer`` with it) are arbitrated as given texts under the scoring form, graded whole,
and the policy file says, and applies, how they were compared. Real embedded SmolLM2, real
BM25 over the demo corpus; the chat texts are written here the way chains frame answers (the
same lead-in on both sides, one of them wrong), since generating them would only slow the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_main

import trustmargin_integrations
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.calibration_file import Calibration
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.calibrate_command import LoadedRun
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.evaluation.metrics import token_f1

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
           "'differential' and graded whole" in " ".join(result.output.split())
    run_dir = tmp_path / "chain.jsonl.check"
    policy = Calibration.load(run_dir / "policy.json")
    assert policy.scoring_form == "differential"
    # Loading the policy compares a chain's texts the way the check did.
    calibrated = TrustMargin.calibrated(tm.backend, run_dir / "policy.json")
    assert calibrated.config.scoring_form == "differential"

    loaded = LoadedRun.read(run_dir)
    scored = loaded.scored["chain"]
    assert len(scored) == len(records)
    by_id = {r["id"]: r for r in records}
    for s in scored:
        record = by_id[str(s.decision.id).split(":", 1)[1]]
        d = s.decision
        # Same lead-in and closing on both sides: the differing answers were compared, never
        # the shared framing, and the two texts are never reported as agreeing.
        assert d.scoring_form == "differential" and d.source != "agree"
        assert d.rag_answer in record["rag_answer"] and "Hello" not in d.rag_answer
        # Graded whole: the text the chain returns, not the compared words.
        assert s.f1_rag == token_f1(str(record["rag_answer"]), record["answers"])
        assert s.f1_direct == token_f1(str(record["direct_answer"]), record["answers"])
    # Resumed from the cache: nothing is scored again.
    again = run_main(*args)
    assert again.exit_code == 0 and "0 computed" in again.output, again.output
