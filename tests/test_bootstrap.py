"""Paired bootstrap intervals (evaluation/bootstrap.py) and their use in the demo summary.

Scores are per-question numbers in 0..1; the expected intervals are derived by hand (a
constant shift, constant groups) or from the normal approximation of a proportion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_support import run_main
from typer.testing import CliRunner

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.demo import DemoQuestion, DemoRow, summarize
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.bootstrap import (
    BEST_SINGLE,
    grouped_bootstrap,
    paired_bootstrap,
    source_comparisons,
)
from trustmargin_integrations.schema import Decision


def _scores(n: int, seed: int = 3) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    direct = rng.integers(0, 2, n).astype(float)
    rag = rng.integers(0, 2, n).astype(float)
    tm = np.where(rng.random(n) < 0.7, np.maximum(direct, rag), np.minimum(direct, rag))
    return {"direct": direct.tolist(), "rag": rag.tolist(), "trustmargin": tm.tolist()}


def test_same_seed_same_intervals_other_seed_other_intervals() -> None:
    scores = _scores(60)
    first = paired_bootstrap(scores, source_comparisons(), resamples=2000, seed=11)
    again = paired_bootstrap(scores, source_comparisons(), resamples=2000, seed=11)
    other = paired_bootstrap(scores, source_comparisons(), resamples=2000, seed=12)
    assert first == again
    assert first.methods["trustmargin"] != other.methods["trustmargin"]
    assert first.differences != other.differences
    # The point estimates do not depend on the seed, only the intervals do.
    assert first.methods["rag"].mean == other.methods["rag"].mean
    # Adding a comparison draws the same questions: the methods' intervals do not move.
    fewer = paired_bootstrap(scores, [], resamples=2000, seed=11)
    assert fewer.methods == first.methods


def test_pairing_a_constant_shift_has_a_zero_width_interval() -> None:
    base = [float(v) for v in np.linspace(0.0, 0.8, 50)]
    scores = {"direct": base, "rag": base, "trustmargin": [v + 0.1 for v in base]}
    result = paired_bootstrap(scores, source_comparisons(), resamples=1000)
    tm = result.methods["trustmargin"]
    assert tm.mean == pytest.approx(100 * (np.mean(base) + 0.1))
    assert tm.high - tm.low > 10  # each method alone varies a lot from resample to resample
    diff = result.differences["trustmargin - direct"]
    # ... but the same questions are drawn for both methods, so the difference is exactly 10.
    assert (diff.mean, diff.low, diff.high) == pytest.approx((10.0, 10.0, 10.0))
    assert diff.p_positive == 1.0
    same = paired_bootstrap({"a": base, "b": base}, [("a", "b")], resamples=500)
    assert same.differences["a - b"].p_positive == 0.0  # equal means are not "> 0"


def test_interval_matches_the_normal_approximation_of_a_proportion() -> None:
    n = 400
    rng = np.random.default_rng(5)
    values = (rng.random(n) < 0.5).astype(float).tolist()
    iv = paired_bootstrap({"m": values}, resamples=10_000, seed=0).methods["m"]
    p = float(np.mean(values))
    half = 100 * 1.96 * np.sqrt(p * (1 - p) / n)
    assert iv.mean == pytest.approx(100 * p)
    assert iv.low == pytest.approx(100 * p - half, abs=0.6)
    assert iv.high == pytest.approx(100 * p + half, abs=0.6)


def test_best_single_source_is_the_better_mean() -> None:
    scores = {"direct": [1.0, 1.0, 0.0, 1.0], "rag": [0.0, 1.0, 0.0, 0.0],
              "trustmargin": [1.0, 1.0, 1.0, 0.0]}
    result = paired_bootstrap(scores, source_comparisons(), resamples=200)
    best = result.differences[f"trustmargin - {BEST_SINGLE}"]
    assert best.b == "direct"
    assert best.mean == pytest.approx(0.0)
    assert result.differences["trustmargin - rag"].mean == pytest.approx(50.0)


def test_groups_are_resampled_within_themselves() -> None:
    # One dataset all right, one all wrong: the Average is 50 in every resample when each
    # dataset is resampled within itself (pooling the questions would make it vary).
    groups = {"a": {"m": [1.0] * 30}, "b": {"m": [0.0] * 70}}
    result = grouped_bootstrap(groups, resamples=500)
    iv = result.methods["m"]
    assert (iv.mean, iv.low, iv.high) == (50.0, 50.0, 50.0)
    assert result.sizes == {"a": 30, "b": 70} and result.n == 100
    assert result.small_sample and "a n = 30" in result.note()


def test_small_sample_is_said() -> None:
    small = paired_bootstrap(_scores(99), resamples=100)
    large = paired_bootstrap(_scores(100), resamples=100)
    assert small.small_sample and "Small sample" in small.note() and "n = 99" in small.note()
    assert not large.small_sample and "mall sample" not in large.note()


def test_bad_input_names_the_problem() -> None:
    with pytest.raises(InvalidInputError, match="one score per question"):
        paired_bootstrap({"a": [1.0, 0.0], "b": [1.0]})
    with pytest.raises(InvalidInputError, match="unknown method"):
        paired_bootstrap({"a": [1.0]}, [("a", "zzz")])
    with pytest.raises(InvalidInputError, match="needs both"):
        paired_bootstrap({"a": [1.0]}, [("a", BEST_SINGLE)])
    with pytest.raises(InvalidInputError, match="non-finite"):
        paired_bootstrap({"a": [float("nan")]})


def _row(i: int, direct_ok: bool, rag_ok: bool, chose_rag: bool) -> DemoRow:
    d = Decision.model_validate(dict(
        question=f"q{i}", answer="b" if chose_rag else "a", source="rag" if chose_rag else "direct",
        reason="margin_above_tau" if chose_rag else "margin_at_or_below_tau",
        direct_answer="a", rag_answer="b", direct_generated=True, rag_generated=True,
        m_prior=0.0, m_bind=0.0, m=0.0, lambda_bind=0.5, tau=-1.5, passages_given=1,
        passages_used=1, context_tokens=5, context_truncated=False, model_id="m",
        prompt_version="v"))
    f1 = {"direct": float(direct_ok), "rag": float(rag_ok),
          "trustmargin": float(rag_ok if chose_rag else direct_ok),
          "oracle": float(direct_ok or rag_ok)}
    f1["paper_rule"] = f1["trustmargin"]  # the rule decided these rows
    return DemoRow(DemoQuestion(f"q{i}", f"q{i}", ["x"], "demo"), d, f1, dict(f1))


def test_demo_summary_has_intervals_and_differences() -> None:
    rows = [_row(i, i % 2 == 0, i % 3 == 0, i % 4 != 1) for i in range(12)]
    result = summarize(rows, resamples=1000, seed=4)
    assert result.n == 12
    assert result.scores["direct"]["f1"] == pytest.approx(100 * 6 / 12)
    for method, iv in result.f1.methods.items():
        assert iv.mean == pytest.approx(result.scores[method]["f1"])
        assert iv.low <= iv.mean <= iv.high
    assert set(result.f1.differences) == {"trustmargin - best_single", "trustmargin - direct",
                                          "trustmargin - rag"}
    assert "Small sample" in result.note() and "n = 12" in result.note()
    assert result.f1 == summarize(rows, resamples=1000, seed=4).f1


@pytest.mark.slow
def test_demo_command_prints_intervals(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from trustmargin_integrations.cli import app

    def from_pretrained(cls: type[TrustMargin], model: str = "smollm2-135m", *,
                        config: TrustMarginConfig | None = None, **kwargs: Any) -> TrustMargin:
        return cls(backend, config)  # the session's embedded model, not a second copy

    monkeypatch.setattr(TrustMargin, "from_pretrained", classmethod(from_pretrained))
    result = CliRunner().invoke(app, ["demo", "--limit", "3"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Summary over 3 questions" in out and "F1 95% CI" in out
    assert "trustmargin - best single (" in out and "P>0" in out
    assert "n = 3 questions" in out and "Small sample" in out
    # The demo points to the measured effect on real questions, read from the shipped files.
    assert "Measured on real benchmarks" in out
    assert ("qwen2.5-1.5b, 115 hotpotqa + 50 cwq + 50 2wiki held-out benchmark questions"
            in out)
    assert "shipped policy (always-RAG)" in out


def test_bootstrap_resamples_are_capped_before_any_work(tmp_path: Path) -> None:
    """``calibrate --resamples 100000000`` grew past 6 GB; now it is one typed line."""
    from trustmargin_integrations.evaluation.bootstrap import MAX_RESAMPLES, paired_bootstrap

    with pytest.raises(InvalidInputError) as err:
        paired_bootstrap({"direct": [0.0, 1.0], "rag": [1.0, 1.0]},
                         resamples=MAX_RESAMPLES + 1)
    assert err.value.field == "resamples"
    for command in ("calibrate", "check"):
        run = run_main(command, str(tmp_path / "no_run"), "--resamples", "100000000")
        assert run.exit_code == 2 and "--resamples" in run.output, run.output
