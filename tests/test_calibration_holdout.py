"""Hold-out calibration, shipped calibrations and the report's calibrated / per-type sections.

The run directories here are synthetic: Decisions with margins drawn from a known rule
(lambda 1.2, tau -0.7; see test_calibration.py) written through the real result store and
manifest, so that ``calibrate_run`` and ``build_report`` read them exactly as they read a real
``trustmargin eval`` run. A real run of the embedded model is in test_calibration.py.
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
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation import rule_fit as cal
from trustmargin_integrations.evaluation.calibrate_command import calibrate_run
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.diagnostics import score_decision
from trustmargin_integrations.evaluation.report import build_report
from trustmargin_integrations.evaluation.rule_fit import Problem, split_holdout
from trustmargin_integrations.evaluation.rundir import open_store, record_dataset
from trustmargin_integrations.evaluation.runner import EvalRecord
from trustmargin_integrations.policy_file import PolicyFile, shipped_models, shipped_path
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule.replay import replay, replay_winner
from trustmargin_integrations.schema import Decision

TRUE_LAMBDA, TRUE_TAU = 1.2, -0.7


def _decision(ident: str, m_prior: float, m_bind: float) -> Decision:
    m = m_prior + 0.5 * m_bind
    return Decision.model_validate(dict(
        id=ident, question=f"question {ident}", answer="Paris", source="direct",
        reason="margin_above_tau" if m > -1.5 else "margin_at_or_below_tau",
        direct_answer="Paris", rag_answer="Lyon", direct_generated=True, rag_generated=True,
        m_prior=m_prior, m_bind=m_bind, m=m, lambda_bind=0.5, tau=-1.5, passages_given=3,
        passages_used=3, context_tokens=100, context_truncated=False, model_id="synthetic",
        prompt_version=PROMPT_VERSION))


def _write_run(run_dir: Path, sizes: dict[str, int], seed: int = 0,
               types: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """A run directory of synthetic decisions whose gold follows the true rule; returns the
    question ids per dataset."""
    rng = np.random.default_rng(seed)
    store = open_store(run_dir)
    ids: dict[str, list[str]] = {}
    for name, n in sizes.items():
        records = []
        for i in range(n):
            p, b = float(rng.uniform(-4, 4)), float(rng.uniform(-3, 3))
            ident = f"{name}:{i}"
            gold = "Lyon" if p + TRUE_LAMBDA * b > TRUE_TAU else "Paris"
            decision = _decision(ident, p, b)
            key = f"{name}-{i}"
            store.put(key, {"decision": decision.model_dump(mode="json"), "retrieval_s": 0.0})
            meta = {"type": types[i % len(types)]} if types else {}
            example = EvalExample(dataset=name, id=str(i), question=decision.question,
                                  answers=(gold,), meta=meta)
            records.append(EvalRecord(example, key, (), decision, 0.0, computed=True))
        record_dataset(run_dir, name, records, {"retrieval": "precomputed", "top_k": 3,
                                                "dtype": "float32", "command": "pytest"})
        ids[name] = [f"{name}:{i}" for i in range(n)]
    return ids


def test_holdout_split_is_stratified_seeded_and_disjoint() -> None:
    names = ["a"] * 40 + ["b"] * 21
    keep = split_holdout(names, 0.5, seed=3)
    assert keep == split_holdout(names, 0.5, seed=3)
    assert keep != split_holdout(names, 0.5, seed=4)
    assert sum(not k for k, n in zip(keep, names, strict=True) if n == "a") == 20
    assert sum(not k for k, n in zip(keep, names, strict=True) if n == "b") == round(10.5)
    assert all(split_holdout(names, 0.0, seed=0))
    with pytest.raises(InvalidInputError, match="--holdout"):
        split_holdout(names, 1.0, seed=0)
    with pytest.raises(InvalidInputError, match="nothing to"):
        split_holdout(["a", "b", "b"], 0.5, seed=0)  # 'a' alone cannot be split


def test_holdout_fit_never_sees_the_held_out_questions(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _write_run(tmp_path / "run", {"a": 60, "b": 40})
    fitted_indices: list[set[int]] = []
    original = Problem.fit

    def spy(self: Problem, index: object = None) -> cal.Fit:
        fitted_indices.append(set(range(len(self))) if index is None
                              else {int(q) for q in index})  # type: ignore[attr-defined]
        return original(self, index)  # type: ignore[arg-type]

    monkeypatch.setattr(Problem, "fit", spy)
    c, cv = calibrate_run(tmp_path / "run", folds=4, holdout=0.5, split_seed=7, resamples=200)
    fit_ids = set(c.fitted_on.question_ids)
    all_ids = {i for v in ids.values() for i in v}
    order = ids["a"] + ids["b"]
    held = {order.index(i) for i in all_ids - fit_ids}
    assert len(fit_ids) == c.fitted_on.n == 50
    assert c.fitted_on.datasets == {"a": 30, "b": 20}
    # Every fit (4 folds and the final one) saw only questions of the fit part.
    assert len(fitted_indices) == 5
    assert all(not (seen & held) for seen in fitted_indices)
    assert cv is not None and all(len(f.train) + len(f.test) == 50 for f in cv.fold_fits)
    # The held-out comparison is on exactly the other 50 questions.
    assert c.held_out is not None
    assert c.held_out.n == 50 and c.held_out.sizes == {"a": 30, "b": 20}
    assert c.fitted_on.holdout == 0.5 and c.fitted_on.split_seed == 7
    # Direct's held-out score is the share of held-out questions whose gold is Direct's
    # answer (the mean of the two datasets' shares), recomputed from the stored margins.
    store = open_store(tmp_path / "run")
    shares = []
    for name in ("a", "b"):
        golds = []
        for key in store:
            d = Decision.model_validate(store.get(key)["decision"])  # type: ignore[index]
            if d.id.startswith(name + ":") and d.id not in fit_ids:  # type: ignore[union-attr]
                golds.append(d.m_prior + TRUE_LAMBDA * d.m_bind <= TRUE_TAU)  # type: ignore[operator]
        shares.append(np.mean(golds))
    assert c.held_out.methods["direct"].mean == pytest.approx(100 * np.mean(shares))


def test_holdout_comparison_is_the_fitted_rule_on_unseen_questions(tmp_path: Path) -> None:
    _write_run(tmp_path / "run", {"a": 30})
    c, _ = calibrate_run(tmp_path / "run", folds=0, holdout=0.4, split_seed=1, resamples=300)
    path = c.save(tmp_path / "cal.json")
    loaded = PolicyFile.load(path)
    assert loaded == c
    store = open_store(tmp_path / "run")
    fitted = set(c.fitted_on.question_ids)
    held_scores = []
    for key in store:
        d = Decision.model_validate(store.get(key)["decision"])  # type: ignore[index]
        if d.id in fitted:
            continue
        gold = "Lyon" if d.m_prior + TRUE_LAMBDA * d.m_bind > TRUE_TAU else "Paris"  # type: ignore[operator]
        s = score_decision(d, [gold])
        held_scores.append(s.f1(replay(d, lambda_bind=c.policy.lambda_bind, tau=c.policy.tau)))
    assert len(held_scores) == 12
    assert c.held_out is not None
    assert c.held_out.methods["calibrated"].mean == pytest.approx(100 * np.mean(held_scores))


def test_shipped_calibrations_load_and_are_refused_for_another_model() -> None:
    models = shipped_models()
    assert models, "the package ships at least one calibration"
    for name in models:
        c = PolicyFile.coerce("shipped", model=name)
        assert c.model_id == name and c.prompt_version == PROMPT_VERSION
        # Shipped files are fitted on part of a run and say which questions they saw.
        assert c.fitted_on.question_ids and c.held_out is not None
        assert shipped_path(name).is_file()
    with pytest.raises(InvalidInputError, match="no policy file is shipped") as err:
        PolicyFile.coerce("shipped", model="some/other-model")
    assert err.value.field == "calibration" and "trustmargin calibrate" in err.value.fix


def test_shipped_calibration_is_checked_against_the_loaded_model(backend: object) -> None:
    other = next(m for m in shipped_models() if m != "smollm2-135m")
    with pytest.raises(InvalidInputError, match="was fitted for model"):
        TrustMargin.calibrated(backend, PolicyFile.coerce("shipped", model=other))  # type: ignore[arg-type]


def test_report_has_the_calibrated_rule_and_question_types(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, {"a": 50, "b": 30}, types=("comparison", "compositional"))
    c, _ = calibrate_run(run, folds=0, holdout=0.5, split_seed=0, resamples=200)
    cal_file = c.save(tmp_path / "cal.json")
    result = CliRunner().invoke(app, ["report", str(run), "--calibration", str(cal_file)])
    assert result.exit_code == 0, result.output
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "## Calibrated rule (on questions the fit did not see)" in md
    assert "5-fold cross-validation over this run" in md
    assert "run `trustmargin check RUN_DIR`" in md  # the report points to the domain check
    assert "the 40 questions of this run outside its fit (40 ids listed" in md
    assert "### Per question type" in md and "| a | comparison | 25 |" in md
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    cv = summary["calibrated"]["cross_validated"]
    assert set(cv) == {"a", "b", "average"}
    assert cv["a"]["f1"]["n"] == 50  # every question scored once, by a fit that did not see it
    held = summary["calibrated"]["calibration_file"]
    assert held["average"]["f1"]["n"] == 40
    assert held["average"]["f1"]["methods"]["calibrated"]["mean"] == pytest.approx(
        c.held_out.methods["calibrated"].mean)  # type: ignore[union-attr]
    assert set(summary["question_types"]["a"]) == {"comparison", "compositional"}
    # A calibration of another model is refused, naming the field.
    other = c.model_copy(update={"model_id": "another"}).save(tmp_path / "other.json")
    with pytest.raises(InvalidInputError, match="was fitted for model"):
        build_report(run, calibration=other)


def test_report_applies_a_calibration_files_policy_not_only_its_numbers(tmp_path: Path
                                                                       ) -> None:
    """A file written by ``trustmargin check`` may say "always RAG": the report's row for it
    must be plain RAG's scores, not the margin rule under the file's lambda and tau."""
    from trustmargin_integrations.rule import Policy

    run = tmp_path / "run"
    _write_run(run, {"a": 50, "b": 30}, types=("comparison", "compositional"))
    c, _ = calibrate_run(run, folds=0, holdout=0.5, split_seed=0, resamples=200)
    rule_md = build_report(run, calibration=c).read_text(encoding="utf-8")
    rule_row = json.loads((run / "summary.json").read_text())["calibrated"]["calibration_file"]
    always_rag = PolicyFile.model_validate({**c.model_dump(), "score": None,
                                            "default_score": None, "grid": None,
                                            "policy": Policy.always_rag()})
    md = build_report(run, calibration=always_rag).read_text(encoding="utf-8")
    assert "**Policy file** (policy always-RAG;" in md
    held = json.loads((run / "summary.json").read_text())["calibrated"]["calibration_file"]
    for name in ("a", "b", "average"):
        methods = held[name]["f1"]["methods"]
        assert methods["calibrated"]["mean"] == pytest.approx(methods["rag"]["mean"])
    assert held["policy"] == {"policy": "always_rag"}
    assert rule_row["average"]["f1"]["methods"]["calibrated"]["mean"] != pytest.approx(
        held["average"]["f1"]["methods"]["calibrated"]["mean"])
    assert "**Policy file** (policy TrustMargin (fitted: lambda" in rule_md


def test_grid_choices_are_the_replayed_rule_in_every_cell() -> None:
    # The grid is computed array-wise with the rule package's array forms; it must
    # equal rule.replay.replay cell by cell, settled decisions and margins at a cell edge included.
    rng = np.random.default_rng(5)
    decisions = [_decision(f"x:{i}", float(rng.uniform(-4, 4)), float(rng.uniform(-3, 3)))
                 for i in range(40)]
    decisions.append(_decision("x:edge", -1.5, 0.0))  # M == tau at (any lambda, -1.5)
    settled = _decision("x:agree", 0.0, 0.0).model_copy(
        update={"reason": "answers_agree", "m_prior": None, "m_bind": None, "m": None})
    decisions.append(settled)
    scored = [score_decision(d, ["Paris"]) for d in decisions]
    problem = Problem({"x": scored})
    for q, d in enumerate(decisions):
        expected = [[replay(d, lambda_bind=lam, tau=tau) == "rag" for tau in problem.taus]
                    for lam in problem.lambdas]
        assert problem.rag[q].tolist() == expected, d.id


def test_cli_calibration_option_conflicts_and_unknown_models(tmp_path: Path) -> None:
    from trustmargin_integrations.demo import demo_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p.model_dump()) + "\n" for p in demo_corpus()),
                      encoding="utf-8")
    runner = CliRunner()
    both = runner.invoke(app, ["ask", "Who?", "--corpus", str(corpus), "--calibration",
                               "shipped", "--tau", "0.5"])
    assert both.exit_code != 0
    text = " ".join(both.output.split()) + str(both.exception or "")
    assert "--tau" in text and "cannot be combined with --calibration" in text
    unknown = runner.invoke(app, ["ask", "Who?", "--corpus", str(corpus), "--model",
                                  "no/such-model", "--calibration", "shipped"])
    assert unknown.exit_code != 0
    text = " ".join(unknown.output.split()) + str(unknown.exception or "")
    assert "no policy file is shipped" in text


def test_check_with_holdout_chooses_on_one_part_and_scores_on_the_other(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check --holdout 0.5``: the policy is chosen on the fitted half only (a spy on the
    selection's questions), and the file's held-out row is that policy replayed on the other
    half (``rule.replay.replay_winner``), next to the paper's rule and both sources."""
    from trustmargin_integrations.evaluation import check_command as module
    from trustmargin_integrations.evaluation.diagnostics import score_records
    from trustmargin_integrations.evaluation.rundir import load_run

    run = tmp_path / "run"
    _write_run(run, {"a": 60, "b": 40})
    seen: list[list[int]] = []
    real = module.check_policy

    def spy(table: Any, index: Any = None, **kwargs: Any) -> Any:
        seen.append(list(index))
        return real(table, index, **kwargs)

    monkeypatch.setattr(module, "check_policy", spy)
    from trustmargin_integrations.evaluation import calibrate_command
    reads: list[Path] = []

    def counted_load_run(run_dir: Path) -> Any:
        reads.append(Path(run_dir))
        return load_run(run_dir)

    for reader in (calibrate_command, module):  # each module of the check that could read the run
        monkeypatch.setattr(reader, "load_run", counted_load_run, raising=False)
    result, c = module.check_run(run, folds=2, resamples=200, holdout=0.5, split_seed=1)
    assert reads == [run]  # the run is read (and its records scored) once, not per stage
    scored = [s for r in load_run(run) for s in score_records(r.records)]
    fitted = set(c.fitted_on.question_ids)
    assert len(fitted) == 50 and [len(i) for i in seen] == [50]
    assert {str(scored[q].decision.id) for q in seen[0]} == fitted
    held = [s for s in scored if str(s.decision.id) not in fitted]
    assert c.held_out is not None and c.held_out.n == 50
    assert c.held_out.sizes == {"a": 30, "b": 20}
    policy = c.decision_policy
    by_dataset = {name: [s.f1("direct" if replay_winner(s.decision, policy) is None else "rag")
                         for s in held if s.decision.id.startswith(name)]
                  for name in ("a", "b")}
    expected = 100 * np.mean([np.mean(v) for v in by_dataset.values()])
    assert c.held_out.methods["calibrated"].mean == pytest.approx(expected)
    assert c.policy == result.chosen
    lines = module.describe_check(result, c)
    assert any("held out before choosing" in line for line in lines)
