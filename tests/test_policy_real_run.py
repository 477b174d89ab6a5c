"""The domain check on a small real eval run of the embedded model (no synthetic margins).

Eight of the project's own demo questions with their BM25 top-3 passages are evaluated by
SmolLM2 (the pattern of test_calibration.py's end-to-end test); the check must replay every
policy exactly as the arbiter's rule does on the recorded Decisions, and agree with the
existing tables of evaluation/diagnostics.py where no fit is involved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.evaluation.diagnostics import method_scores, score_records
from trustmargin_integrations.evaluation.domain_check import PolicyCheckResult, check_policy
from trustmargin_integrations.evaluation.policy_selection import PolicyTable
from trustmargin_integrations.rule import SETTLED, MarginPair, Policy, Verdict, apply_policy
from trustmargin_integrations.rule.replay import replay

QUESTIONS = ("q00", "q02", "q04", "q05", "q09", "q11", "q14", "q16")


@pytest.mark.slow
def test_check_on_a_real_run_replays_the_arbiters_rule(tm: TrustMargin, tmp_path: Path) -> None:
    from trustmargin_integrations.demo import demo_corpus, demo_questions
    from trustmargin_integrations.evaluation.datasets import load_dataset
    from trustmargin_integrations.evaluation.rundir import load_run, open_store, record_dataset
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages, run_eval
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    index = BM25Index.build(demo_corpus())
    questions = {q.id: q for q in demo_questions()}
    rows = [{"test_id": q.id, "question": q.question, "answer": q.answers,
             "passages": [{"title": p.title, "text": p.text}
                          for p in index.search(q.question, 3)]}
            for q in (questions[i] for i in QUESTIONS)]
    (tmp_path / "demo8.json").write_text(json.dumps(rows), encoding="utf-8")
    run_dir = tmp_path / "run"
    records = run_eval(tm, load_dataset(str(tmp_path / "demo8.json")), open_store(run_dir),
                       source=PrecomputedPassages(), top_k=3, batch_size=4, progress=False)
    record_dataset(run_dir, "demo8", records, {"retrieval": "precomputed", "top_k": 3})
    scored = score_records(load_run(run_dir)[0].records)
    table = PolicyTable({"demo8": scored})

    result = check_policy(table, folds=2, resamples=500, selection_resamples=200)

    # Policies without numbers to fit score, cross-validated, what the report's table says.
    table_f1 = {m: f1 for m, (f1, _) in method_scores(scored).items()}
    assert result.candidates["paper"].f1.mean == pytest.approx(table_f1["trustmargin"])
    assert result.candidates["always_rag"].f1.mean == pytest.approx(table_f1["rag"])
    assert result.candidates["always_direct"].f1.mean == pytest.approx(table_f1["direct"])
    # Every candidate, as fitted on the run, replays through the arbiter's rule.
    for candidate in result.candidates.values():
        policy = candidate.policy
        picks = table.chooses_rag(policy, range(len(scored)))
        for s, rag in zip(scored, picks, strict=True):
            d = s.decision
            settled = Verdict(SETTLED[d.reason], d.reason) if d.reason in SETTLED else None
            margins = [None] if settled else [MarginPair(d.m_prior, d.m_bind)]
            verdict = apply_policy(policy, margins, settled)
            assert rag == (verdict.choice == "rag")
            if policy == Policy.paper():
                # The arbiter's own choice ("agree": both answers are the same text).
                assert verdict.choice == replay(d)
                assert d.source in (verdict.choice, "agree")
    assert result.n == 8 and result.small_sample and result.verdict
    assert sum(f.n_test for f in result.nested.folds) == 8
    assert PolicyCheckResult.model_validate_json(result.model_dump_json()) == result
