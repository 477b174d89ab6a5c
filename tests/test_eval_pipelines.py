"""``trustmargin eval --pipeline``: other RAG pipelines as candidates, cached and reported.

A real run of the embedded model on four of the project's demo questions (their BM25 top-3
passages written as an eval question file, as in test_calibration.py), then DTR-RAG and IRCoT
on the same questions, searching a real BM25 index over the demo corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.demo import demo_corpus, demo_questions
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import load_dataset
from trustmargin_integrations.evaluation.pipeline_runner import parse_pipelines, run_pipeline
from trustmargin_integrations.evaluation.report import build_report
from trustmargin_integrations.evaluation.rundir import load_run, open_store, record_dataset
from trustmargin_integrations.evaluation.runner import PrecomputedPassages, run_eval
from trustmargin_integrations.retrieval.bm25 import BM25Index
from trustmargin_integrations.rule.replay import multi_candidate_answer

PIPES = ("dtr", "ircot")
PARAMS = {"dtr": {"threshold": 0.0, "k": 3}, "ircot": {"max_steps": 1, "k": 2}}


def _questions_file(tmp_path: Path, index: BM25Index) -> Path:
    questions = {q.id: q for q in demo_questions()}
    rows = [{"test_id": q.id, "question": q.question, "answer": q.answers,
             "passages": [{"title": p.title, "text": p.text}
                          for p in index.search(q.question, 3)]}
            for q in (questions[i] for i in ("q02", "q04", "q11", "q14"))]
    path = tmp_path / "demo4.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_pipeline_names_are_checked() -> None:
    assert parse_pipelines("bm25, IRCoT,dtr,dtr") == ["ircot", "dtr"]
    assert parse_pipelines("bm25") == []
    with pytest.raises(InvalidInputError, match="unknown pipeline") as err:
        parse_pipelines("bm25,selfrag")
    assert err.value.field == "--pipeline" and "ircot" in err.value.fix


@pytest.mark.slow
def test_pipelines_are_arbitrated_against_the_same_direct_and_passages(
        tm: TrustMargin, tmp_path: Path) -> None:
    index = BM25Index.build(demo_corpus())
    examples = load_dataset(str(_questions_file(tmp_path, index)))
    run_dir = tmp_path / "run"
    store = open_store(run_dir)
    records = run_eval(tm, examples, store, source=PrecomputedPassages(), top_k=3,
                       batch_size=4, progress=False)
    piped = {name: run_pipeline(tm, records, store, name=name, retriever=index, top_k=3,
                                params=PARAMS[name], batch_size=2, progress=False)
             for name in PIPES}
    for name, recs in piped.items():
        assert [r.example.id for r in recs] == [r.example.id for r in records]
        assert all(r.computed for r in recs)
        for main, rec in zip(records, recs, strict=True):
            d = rec.decision
            # Same Direct answer, same scored passages, the pipeline's answer on the RAG side.
            assert d.direct_answer == main.decision.direct_answer and not d.direct_generated
            assert d.passages_used == main.decision.passages_used
            if d.direct_likelihoods and main.decision.direct_likelihoods:
                # Same text, same prompts: equal up to batch-shape float noise (fp32).
                got, ref = d.direct_likelihoods.model_dump(), main.decision.direct_likelihoods
                assert got == pytest.approx(ref.model_dump(), abs=1e-4)  # type: ignore[union-attr]
            trace = d.metadata["pipeline"]
            assert trace["pipeline"] == name and trace["params"]
            assert trace["steps"], "the audit trace lists the pipeline's steps"
            assert rec.pipeline_s > 0
    record_dataset(run_dir, "demo4", records, {"retrieval": "precomputed", "top_k": 3,
                                               "command": "pytest"},
                   pipelines=piped, pipeline_info={n: {"params": PARAMS[n]} for n in PIPES})
    # Resumable: the same call computes nothing the second time.
    again = run_pipeline(tm, records, store, name="dtr", retriever=index, top_k=3,
                         params=PARAMS["dtr"], batch_size=2, progress=False)
    assert not any(r.computed for r in again)
    assert [r.decision for r in again] == [r.decision for r in piped["dtr"]]
    # The manifest brings every pipeline record back, and the report shows the table.
    run = load_run(run_dir)[0]
    assert set(run.pipelines) == set(PIPES)
    assert [r.decision for r in run.pipelines["ircot"]] == [r.decision for r in piped["ircot"]]
    md = build_report(run_dir).read_text(encoding="utf-8")
    assert "## Plug-and-play complementarity" in md
    for label in ("| BM25-RAG | 4 |", "| DTR-RAG | 4 |", "| IRCoT | 4 |",
                  "| All 3 candidates + TrustMargin (multi) | 4 |",
                  "| Oracle(Direct, all 3 candidates) | 4 |"):
        assert label in md
    # Multi-candidate choice replayed from the pairwise records equals what the arbiter
    # decides when it is given all candidates at once.
    for i, main in enumerate(records):
        pairwise = [main.decision, piped["dtr"][i].decision, piped["ircot"][i].decision]
        together = tm.arbitrate(main.example.question, list(main.passages),
                                direct_answer=main.decision.direct_answer,
                                rag_candidates=[("bm25", main.decision.rag_answer),
                                                ("dtr", pairwise[1].rag_answer),
                                                ("ircot", pairwise[2].rag_answer)])
        assert multi_candidate_answer(pairwise) == together.answer
