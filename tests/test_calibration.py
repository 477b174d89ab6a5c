"""Calibration of lambda_bind and tau from cached Decisions (evaluation/rule_fit.py; the
file model: policy_file.py).

Synthetic Decisions carry margins generated with a known (lambda, tau) and gold answers that
make that rule exactly right, so the fit must find it; cross-validation is instrumented to
prove no question is scored by a fit that saw it; the policy file is refused for another
model or prompt version; and ``trustmargin calibrate`` runs end to end on a small real eval
run of the embedded model (4 questions, the pattern of test_eval_run.py, on the project's own
demo questions so that the candidates' scores are not all zero).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli import app
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation import rule_fit as cal
from trustmargin_integrations.evaluation.diagnostics import (
    hyperparameter_grid,
    method_scores,
    score_decision,
    score_records,
)
from trustmargin_integrations.evaluation.rule_fit import (
    LAMBDAS,
    TAUS,
    Problem,
    assign_folds,
    cross_validate,
)
from trustmargin_integrations.policy_file import PolicyFile
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import replay
from trustmargin_integrations.schema import Decision

TRUE_LAMBDA, TRUE_TAU = 1.2, -0.7  # on the grid, far from the defaults (0.5, -1.5)


def _decision(m_prior: float, m_bind: float, *, reason: str | None = None) -> Decision:
    """A cached decision as the arbiter records it (made at the defaults 0.5 / -1.5)."""
    m = m_prior + 0.5 * m_bind
    return Decision.model_validate(dict(
        question="q", answer="Paris", source="direct",
        reason=reason or ("margin_above_tau" if m > -1.5 else "margin_at_or_below_tau"),
        direct_answer="Paris", rag_answer="Lyon", direct_generated=True, rag_generated=True,
        m_prior=None if reason else m_prior, m_bind=None if reason else m_bind,
        m=None if reason else m, lambda_bind=0.5, tau=-1.5, passages_given=3, passages_used=3,
        context_tokens=100, context_truncated=False, model_id="synthetic",
        prompt_version=PROMPT_VERSION))


def _truth(m_prior: float, m_bind: float, lam: float, tau: float) -> str:
    """Gold answer that makes the rule with (lam, tau) right: RAG's when M > tau."""
    return "Lyon" if m_prior + lam * m_bind > tau else "Paris"


def _synthetic(n_random: int, seed: int, lam: float = TRUE_LAMBDA, tau: float = TRUE_TAU,
               flip: float = 0.0) -> list:
    """Scored decisions: pairs straddling the true boundary (+-0.02) at m_bind in -3..3, plus
    random margins; ``flip`` is the share of random gold answers swapped (label noise)."""
    rng = np.random.default_rng(seed)
    margins = [(tau - lam * b + eps, b) for b in np.linspace(-3, 3, 13) for eps in (0.02, -0.02)]
    margins += [(float(p), float(b)) for p, b in zip(rng.uniform(-4, 4, n_random),
                                                      rng.uniform(-3, 3, n_random), strict=True)]
    out = []
    for p, b in margins:
        gold = _truth(p, b, lam, tau)
        if rng.random() < flip:
            gold = "Paris" if gold == "Lyon" else "Lyon"
        out.append(score_decision(_decision(float(p), float(b)), [gold]))
    return out


def test_fit_recovers_the_lambda_and_tau_that_generated_the_data() -> None:
    scored = _synthetic(200, seed=1)
    for objective in ("f1", "em"):
        problem = Problem({"synthetic": scored}, objective)  # type: ignore[arg-type]
        fit = problem.fit()
        assert (fit.lambda_bind, fit.tau) == (TRUE_LAMBDA, TRUE_TAU)
        assert fit.score == pytest.approx(100.0)  # the generating rule is exactly right
        assert fit.default_score < 90.0  # and the defaults are not
        # Every held decision replays to the truth at the fit (the fit uses the one rule).
        assert all(replay(s.decision, lambda_bind=fit.lambda_bind, tau=fit.tau) == "rag"
                   for s in scored if s.f1_rag == 1.0)


def test_grid_scores_equal_the_replayed_tables() -> None:
    # The objective of every cell is the paper's Average of method_scores over datasets.
    a, b = _synthetic(40, seed=2, flip=0.2), _synthetic(10, seed=3, lam=0.3, tau=0.5)
    problem = Problem({"a": a, "b": b}, "f1")
    grid = problem.grid_scores(range(len(problem)))
    for lam, tau in [(0.5, -1.5), (0.0, 3.0), (2.0, -5.0), (1.2, -0.7), (0.3, 0.5)]:
        i, j = LAMBDAS.index(lam), TAUS.index(tau)
        expected = hyperparameter_grid({"a": a, "b": b}, [lam], [tau])[0][0]
        assert 100 * grid[i, j] == pytest.approx(expected)
    assert 100 * grid[LAMBDAS.index(0.5), TAUS.index(-1.5)] == pytest.approx(
        np.mean([method_scores(a)["trustmargin"][0], method_scores(b)["trustmargin"][0]]))


def test_ties_keep_the_paper_defaults() -> None:
    # Settled decisions (answers agree, a blank answer) do not depend on lambda or tau: every
    # cell ties and the defaults stay.
    settled = [score_decision(_decision(0.0, 0.0, reason=r), ["Paris"])
               for r in ("answers_agree", "rag_answer_blank", "no_evidence")]
    fit = Problem({"x": settled}).fit()
    assert (fit.lambda_bind, fit.tau) == (0.5, -1.5)
    # A tie between cells away from the default goes to the nearest one.
    one = [score_decision(_decision(2.0, 0.0), ["Lyon"])]  # RAG right: any tau < 2 works
    fit = Problem({"x": one}).fit()
    assert (fit.lambda_bind, fit.tau) == (0.5, -1.5)
    one = [score_decision(_decision(-3.0, 0.0), ["Lyon"])]  # needs tau < -3
    fit = Problem({"x": one}).fit()
    assert (fit.lambda_bind, fit.tau) == (0.5, -3.05)


def test_folds_are_stratified_seeded_and_complete() -> None:
    names = ["a"] * 23 + ["b"] * 11
    folds = assign_folds(names, 5, seed=0)
    assert folds == assign_folds(names, 5, seed=0)
    assert folds != assign_folds(names, 5, seed=1)
    for k in range(5):
        in_a = sum(f == k for f, n in zip(folds, names, strict=True) if n == "a")
        in_b = sum(f == k for f, n in zip(folds, names, strict=True) if n == "b")
        assert in_a in (4, 5) and in_b in (2, 3)
    with pytest.raises(InvalidInputError, match="at least 5 questions"):
        assign_folds(["a"] * 4, 5, seed=0)
    with pytest.raises(InvalidInputError, match=">= 2"):
        assign_folds(["a"] * 4, 1, seed=0)


def test_cross_validation_never_scores_a_question_it_fitted_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    problem = Problem({"a": _synthetic(60, seed=4, flip=0.25),
                       "b": _synthetic(30, seed=5, lam=0.2, tau=0.4, flip=0.25)}, "f1")
    seen: list[set[int]] = []
    original = Problem.fit

    def spy(self: Problem, index: Any = None) -> Any:
        seen.append(set(range(len(self))) if index is None else {int(q) for q in index})
        return original(self, index)

    monkeypatch.setattr(Problem, "fit", spy)
    cv = cross_validate(problem, folds=5, seed=0, resamples=500)
    monkeypatch.undo()

    assert len(seen) == 5  # one fit per fold, none on all questions
    tests = [set(f.test) for f in cv.fold_fits]
    assert set().union(*tests) == set(range(len(problem)))
    assert sum(map(len, tests)) == len(problem)  # each question held out exactly once
    for fold, fitted_on in zip(cv.fold_fits, seen, strict=True):
        assert fitted_on == set(fold.train) and not fitted_on & set(fold.test)
        # The fold's (lambda, tau) is what a fit on its training questions alone gives ...
        alone = problem.fit(sorted(fold.train))
        assert (alone.lambda_bind, alone.tau) == (fold.fit.lambda_bind, fold.fit.tau)
        # ... and its held-out questions are scored by replaying exactly that fit.
        for q in fold.test:
            choice = replay(problem.scored[q].decision, lambda_bind=fold.fit.lambda_bind,
                            tau=fold.fit.tau)
            expected = problem.scored[q].f1(choice)
            assert cv.held_out["calibrated"][q] == expected
    # The folds disagree with each other (label noise), so a leak would have been visible.
    assert len({(f.fit.lambda_bind, f.fit.tau) for f in cv.fold_fits}) > 1
    result = cv.result("f1")
    direct = np.mean([np.mean([s.f1_direct for s in problem.scored[:86]]),
                      np.mean([s.f1_direct for s in problem.scored[86:]])])
    assert result.methods["direct"].mean == pytest.approx(100 * direct)
    assert result.methods["calibrated"].low <= result.methods["calibrated"].mean
    assert set(result.differences) == {"calibrated - default", "calibrated - best_single",
                                       "calibrated - direct", "calibrated - rag"}


def _calibration(**changes: Any) -> PolicyFile:
    base = dict(model_id="smollm2-135m", dtype="float32", prompt_version=PROMPT_VERSION,
                retrieval={"mode": "precomputed", "top_k": 3},
                policy={"kind": "rule", "lambda_bind": 1.2, "tau": -0.7}, objective="f1",
                score=50.0, default_score=40.0,
                grid={"lambdas": list(LAMBDAS), "taus": list(TAUS)},
                fitted_on={"run_dir": "r", "datasets": {"cwq": 4}, "n": 4},
                created_at="2025-01-01T00:00:00+00:00", package_version="0.1.0")
    return PolicyFile.model_validate({**base, **changes})


def test_calibration_file_round_trips_and_applies(tmp_path: Path) -> None:
    c = _calibration()
    path = c.save(tmp_path / "cal.json")
    assert PolicyFile.load(path) == c
    config = c.apply(TrustMarginConfig(top_k=7, batch_size=2))
    assert (config.lambda_bind, config.tau, config.top_k, config.batch_size) == (1.2, -0.7, 7, 2)
    (tmp_path / "bad.json").write_text(json.dumps({"model_id": "x"}))
    with pytest.raises(InvalidInputError, match="not a policy file") as err:
        PolicyFile.load(tmp_path / "bad.json")
    assert err.value.field == "calibration"
    with pytest.raises(InvalidInputError, match="does not exist"):
        PolicyFile.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="finite"):
        _calibration(policy={"kind": "rule", "lambda_bind": 1.2, "tau": float("nan")})


def test_a_mismatched_calibration_is_refused(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trustmargin_integrations.backends.hf import HFBackend

    assert backend.model_id == "smollm2-135m"
    loads: list[str] = []

    def load(model: str, **kwargs: Any) -> Any:
        loads.append(model)
        return backend  # the session's embedded model: the loader is not run twice

    monkeypatch.setattr(HFBackend, "load", staticmethod(load))
    good = _calibration().save(tmp_path / "good.json")
    other_model = _calibration(model_id="qwen2.5-1.5b").save(tmp_path / "qwen.json")
    other_prompts = _calibration(prompt_version="old-v0").save(tmp_path / "old.json")

    tm = TrustMargin.from_pretrained("smollm2-135m", calibration=good,
                                     config=TrustMarginConfig(top_k=2))
    assert (tm.config.lambda_bind, tm.config.tau, tm.config.top_k) == (1.2, -0.7, 2)
    assert tm.backend is backend
    for path, problem in ((other_model, "qwen2.5-1.5b"), (other_prompts, "old-v0")):
        with pytest.raises(InvalidInputError, match=problem) as err:
            TrustMargin.from_pretrained("smollm2-135m", calibration=path)
        assert err.value.field == "calibration" and "calibrate" in err.value.fix
        with pytest.raises(InvalidInputError, match=problem):
            TrustMargin.calibrated(backend, PolicyFile.load(path))
    # A broken file is refused before any model is loaded.
    (tmp_path / "broken.json").write_text("{")
    before = len(loads)
    with pytest.raises(InvalidInputError, match="not a policy file"):
        TrustMargin.from_pretrained("smollm2-135m", calibration=tmp_path / "broken.json")
    assert len(loads) == before
    # Asked for the paper's rule, nothing changes (the default, the shipped policy, is
    # tests/test_defaults.py's).
    assert TrustMargin.from_pretrained("smollm2-135m", calibration=None).config == \
        TrustMarginConfig()


@pytest.mark.slow
def test_calibrate_command_end_to_end_on_a_real_run(tm: TrustMargin, tmp_path: Path) -> None:
    from trustmargin_integrations.demo import demo_corpus, demo_questions
    from trustmargin_integrations.evaluation.datasets import load_dataset
    from trustmargin_integrations.evaluation.rundir import load_run, open_store, record_dataset
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages, run_eval
    from trustmargin_integrations.retrieval.bm25 import BM25Index

    # Four of the project's own demo questions (two that retrieval answers, two it distracts)
    # with their BM25 top-3 passages, written as an eval question file: a real run whose
    # candidates score above zero, unlike the embedded model's first CWQ questions.
    index = BM25Index.build(demo_corpus())
    questions = {q.id: q for q in demo_questions()}
    rows = [{"test_id": q.id, "question": q.question, "answer": q.answers,
             "passages": [{"title": p.title, "text": p.text}
                          for p in index.search(q.question, 3)]}
            for q in (questions[i] for i in ("q02", "q04", "q11", "q14"))]
    (tmp_path / "demo4.json").write_text(json.dumps(rows), encoding="utf-8")
    examples = load_dataset(str(tmp_path / "demo4.json"))
    run_dir = tmp_path / "run"
    records = run_eval(tm, examples, open_store(run_dir), source=PrecomputedPassages(),
                       top_k=3, batch_size=4, progress=False)
    record_dataset(run_dir, "demo4", records, {"retrieval": "precomputed", "top_k": 3,
                                               "dtype": "float32", "batch_size": 4,
                                               "command": "pytest"})
    runner = CliRunner()
    out = tmp_path / "cal.json"
    result = runner.invoke(app, ["calibrate", str(run_dir), "--out", str(out), "--folds", "2",
                                 "--resamples", "500"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "2-fold cross-validation" in text and "Small sample" in text
    assert "calibrated - default" in text and f"calibration: {out}" in text

    c = PolicyFile.load(out)
    assert (c.model_id, c.prompt_version, c.dtype) == (tm.backend.model_id, PROMPT_VERSION,
                                                       "float32")
    assert (c.retrieval.mode, c.retrieval.top_k) == ("precomputed", 3)
    assert c.fitted_on.datasets == {"demo4": 4} and c.fitted_on.run_dir == "run"
    assert c.policy.kind == "rule" and c.objective == "f1"
    assert c.policy.lambda_bind in LAMBDAS and c.policy.tau in TAUS
    assert c.cv is not None and c.cv.folds == 2 and c.cv.small_sample
    assert sum(f.n_test for f in c.cv.fold_fits) == 4
    table = method_scores(score_records(load_run(run_dir)[0].records))
    assert table["oracle"][0] > 0  # the run is not degenerate: some candidate is right
    assert c.default_score == pytest.approx(table["trustmargin"][0])
    assert c.score >= c.default_score
    assert c.cv.methods["direct"].mean == pytest.approx(table["direct"][0])
    assert c.cv.methods["rag"].mean == pytest.approx(table["rag"][0])
    # The replayed fit on all four questions is the score the file claims.
    refit = cal.Problem({"demo4": score_records(records)}).fit()
    assert c.policy == Policy.fitted(refit.lambda_bind, refit.tau) and refit.score == c.score
    # The file loads onto the same model, and changes the arbiter's rule.
    calibrated = TrustMargin.calibrated(tm.backend, out)
    assert (calibrated.config.lambda_bind, calibrated.config.tau) == (c.policy.lambda_bind,
                                                                      c.policy.tau)

    bad = runner.invoke(app, ["calibrate", str(run_dir), "--objective", "bleu"])
    assert isinstance(bad.exception, InvalidInputError) and "--objective" in str(bad.exception)
    too_many = runner.invoke(app, ["calibrate", str(run_dir), "--folds", "5"])
    assert isinstance(too_many.exception, InvalidInputError)
    assert "lower --folds" in str(too_many.exception)

    # The report of the same run carries the intervals and the best-single-source row.
    report = runner.invoke(app, ["report", str(run_dir)])
    assert report.exit_code == 0, report.output
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "demo4 F1 95% CI" in md and "| TrustMargin - best single source |" in md
    assert "Small sample (n < 100)" in md and "### Is TrustMargin's difference real?" in md
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    boot = summary["intervals"]["demo4"]["f1"]
    assert boot["n"] == 4 and boot["methods"]["direct"]["mean"] == pytest.approx(
        table["direct"][0])
