"""``trustmargin check`` end to end: a user's labeled JSONL file (no passages, retrieved from
a corpus with the embedded BM25) is answered and scored once by the real embedded SmolLM2,
the domain check picks a policy, prints its verdict first and writes a policy file that
loads onto the model and sets its policy. Kept to one small run (four of the project's demo
questions): the shared test machine is slow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import DEMO, run_main, write_labeled
from run_support import synthetic_run

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.check_command import describe_check
from trustmargin_integrations.evaluation.datasets import load_examples
from trustmargin_integrations.evaluation.domain_check import PolicyCheckResult
from trustmargin_integrations.evaluation.policy_selection import POLICY_KINDS
from trustmargin_integrations.policy_file import PolicyFile, shipped_path
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule import Policy


def test_jsonl_records_load_and_a_bad_line_is_named(tmp_path: Path) -> None:
    good = tmp_path / "mine.jsonl"
    good.write_text('{"question": "Who?", "answers": ["Ada", "Lovelace"]}\n\n'
                    '{"id": "x", "question": "Where?", "answer": "Paris", '
                    '"passages": [{"title": "P", "text": "Paris."}]}\n', encoding="utf-8")
    first, second = load_examples(good)
    assert (first.answers, first.passages, first.dataset) == (("Ada", "Lovelace"), None, "mine")
    assert second.id == "x" and second.passages and second.passages[0].title == "P"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "Who?", "answer": "Ada"}\n{"question": "Where?"}\n')
    with pytest.raises(InvalidInputError) as err:
        load_examples(bad)
    assert err.value.field == "bad.jsonl:2.answer"
    bad.write_text('{"question": "Who?", "answer": "Ada"}\n{"question": \n')
    with pytest.raises(InvalidInputError, match="not valid JSON") as err:
        load_examples(bad)
    assert err.value.field == "bad.jsonl:2"


@pytest.mark.slow
def test_check_runs_end_to_end_on_a_labeled_file(
        tm: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    # The session's embedded model: `check --model smollm2-135m` must not load it twice.
    monkeypatch.setattr(HFBackend, "load", staticmethod(lambda model, **kwargs: tm.backend))
    labeled = write_labeled(tmp_path / "mine.jsonl", ("q02", "q04", "q11", "q14"))
    args = ["check", str(labeled), "--corpus", str(DEMO / "corpus.json"), "--folds", "2",
            "--resamples", "300"]
    nothing = run_main("check", str(labeled), "--folds", "2")
    assert nothing.exit_code == 2 and "--corpus" in nothing.output  # no passages, no corpus

    result = run_main(*args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    verdict = next(i for i, line in enumerate(lines) if line.startswith(("Keep ", "Use ")))
    assert "cross-validated" in lines[verdict] and "Small sample" in lines[verdict]
    assert all(not line.startswith("candidate policies") for line in lines[:verdict])
    assert "always-RAG" in result.output and "nested" in result.output
    # Four questions keep no margin rule: the next step follows the "Use ..." verdict.
    assert lines[verdict].startswith("Use ")
    flat = " ".join(result.output.split())
    assert "remove the TrustMargin wrapper" in flat and "s of scoring per question here" in flat
    assert "use it:" not in result.output
    run_dir = tmp_path / "mine.jsonl.check"
    policy_file = run_dir / "policy.json"
    assert f"policy: {policy_file}" in " ".join(result.output.split())

    c = PolicyFile.load(policy_file)
    assert (c.model_id, c.prompt_version) == (tm.backend.model_id, PROMPT_VERSION)
    assert c.retrieval.mode == "bm25:corpus.json" and c.fitted_on.datasets == {"mine": 4}
    assert c.policy is not None and c.evidence is not None
    assert c.evidence["verdict"] in result.output and c.evidence["n"] == 4
    assert set(c.evidence["candidates"]) == set(POLICY_KINDS)
    assert Policy.of(**c.evidence["chosen"]) == c.policy
    calibrated = TrustMargin.calibrated(tm.backend, policy_file)
    assert Policy.from_setting(calibrated.config.policy, calibrated.config.lambda_bind,
                               calibrated.config.tau) == c.policy

    # Resumable: a second call answers nothing again; the run directory is an input too.
    again = run_main(*args)
    assert again.exit_code == 0 and "0 computed, 4 from cache" in again.output
    from_dir = run_main("check", str(run_dir), "--folds", "2", "--resamples", "300",
                        "--out", str(tmp_path / "again.json"))
    assert from_dir.exit_code == 0, from_dir.output
    assert PolicyFile.load(tmp_path / "again.json").policy == c.policy


def test_the_objective_is_recorded_in_the_written_files_and_survives_a_reload(
        tmp_path: Path) -> None:
    """``--objective contains`` (no model: a synthetic run directory): the policy file of
    ``check`` and the policy file of ``calibrate`` say what they maximized, and say it
    again after a reload and a rewrite."""
    run_dir = synthetic_run(tmp_path / "run")
    for command, name in (("check", "policy.json"), ("calibrate", "calibration.json")):
        out = tmp_path / name
        result = run_main(command, str(run_dir), "--objective", "contains", "--folds", "2",
                          "--resamples", "200", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "objective: gold stated" in result.output
        written = PolicyFile.load(out)
        assert written.objective == "contains"
        again = PolicyFile.load(written.save(tmp_path / f"again-{name}"))
        assert again == written
    calibration = PolicyFile.load(tmp_path / "calibration.json")
    assert calibration.cv is not None and calibration.cv.objective == "contains"
    policy = PolicyFile.load(tmp_path / "policy.json")
    assert policy.evidence is not None and policy.evidence["objective"] == "contains"
    check = PolicyCheckResult.model_validate(policy.evidence)
    # Reported beside gold stated: F1 (EM of a whole chat answer says nothing).
    assert all(c.contains is not None and c.em is None for c in check.candidates.values())
    bad = run_main("check", str(run_dir), "--objective", "bleu")
    assert bad.exit_code == 2 and "contains for chat or long-form answers" in bad.output


@pytest.mark.parametrize("model", ["smollm2-135m", "qwen2.5-1.5b"])
def test_a_policy_file_written_before_contains_still_loads_and_prints(model: str) -> None:
    """The shipped policy files were written when F1 and EM were the only objectives."""
    old = PolicyFile.load(shipped_path(model))
    assert old.objective == "f1" and old.evidence is not None
    check = PolicyCheckResult.model_validate(old.evidence)
    paper = check.candidates["paper"]
    assert paper.score("contains") is None
    assert paper.em is not None and paper.score("em") == paper.em
    table = [line for line in describe_check(check, old)
             if line.lstrip(" *").startswith("always-RAG")]
    assert len(table) == 1 and "F1" in table[0] and "EM" in table[0]
    assert "gold stated" not in table[0]


def test_the_header_reports_the_passages_the_records_carry() -> None:
    from trustmargin_integrations.evaluation.datasets import EvalExample
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages, passages_shown
    from trustmargin_integrations.schema import Passage

    def example(n: int) -> EvalExample:
        passages = tuple(Passage(id=f"p{i}", text=f"text {i}") for i in range(n))
        return EvalExample(dataset="mine", id=f"q{n}", question="Who?", answers=("Ada",),
                           passages=passages)

    source = PrecomputedPassages()
    assert passages_shown(source, [example(2), example(2)], 3) == \
        "precomputed, 2 passages per question"
    assert passages_shown(source, [example(1), example(5)], 3) == \
        "precomputed, 1-3 passages per question"
