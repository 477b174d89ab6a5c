"""Tables and diagnostics replayed from cached decisions, against hand-computed values.

The decisions are built by hand (they are the cache's data, not a stand-in for a component)
so every number below can be checked with pencil and paper.
"""

from __future__ import annotations

import pytest

from trustmargin_integrations.evaluation.diagnostics import (
    arbitration_diagnostics,
    disagreement_recovery,
    hyperparameter_grid,
    method_scores,
    score_decision,
)
from trustmargin_integrations.rule.replay import kept_rag, replay
from trustmargin_integrations.schema import Decision, ViewLikelihoods


def _decision(direct: str, rag: str, m_prior: float | None = None, m_bind: float | None = None,
              reason: str | None = None) -> Decision:
    lik = None
    m = None
    if reason is None:
        assert m_prior is not None and m_bind is not None
        m = m_prior + 0.5 * m_bind
        reason = "margin_above_tau" if m > -1.5 else "margin_at_or_below_tau"
        lik = ViewLikelihoods(question_only=-1.0, question_context=-1.0, context_only=-1.0,
                              num_tokens=1)
    chose_rag = reason in ("margin_above_tau", "answers_agree", "direct_answer_blank")
    return Decision(
        question="q", answer=rag if chose_rag else direct,
        source="agree" if reason == "answers_agree" else ("rag" if chose_rag else "direct"),
        reason=reason, direct_answer=direct, rag_answer=rag, direct_generated=True,
        rag_generated=True, direct_likelihoods=lik, rag_likelihoods=lik, m_prior=m_prior,
        m_bind=m_bind, m=m, lambda_bind=0.5, tau=-1.5, passages_given=3, passages_used=3,
        context_tokens=300, context_truncated=False, model_id="hand-made",
        prompt_version="trustmargin-appendix-v1")


# (decision, gold): F1 of (Direct, RAG) per row is (1, 0), (0, 1), (1, 1), (2/3, 0).
CASES = [
    (_decision("Paris", "Lyon", m_prior=-3.0, m_bind=1.0), "Paris"),       # M -2.5 -> Direct
    (_decision("Munich", "Berlin", m_prior=-1.0, m_bind=2.0), "Berlin"),   # M  0.0 -> RAG
    (_decision("Rome", "rome", reason="answers_agree"), "Rome"),          # no scoring
    (_decision("Madrid Spain", "Barcelona", m_prior=-1.0, m_bind=-2.0), "Madrid"),  # M -2 -> D
]


@pytest.fixture
def scored() -> list:
    return [score_decision(d, [gold]) for d, gold in CASES]


def test_replay_at_the_default_reproduces_the_recorded_choice() -> None:
    for decision, _ in CASES:
        expected = "rag" if kept_rag(decision) else "direct"
        assert replay(decision) == expected


def test_ablations_replay_single_margins() -> None:
    first = CASES[0][0]
    assert replay(first, kind="weighted_bind") == "rag"  # 0.5 * 1.0 > -1.5
    assert replay(first, kind="prior_only") == "direct"  # -3.0 <= -1.5
    blank = _decision("", "Lyon", reason="direct_answer_blank")
    assert replay(blank, lambda_bind=0.0, tau=100.0) == "rag"  # no threshold picks a blank answer


def test_method_table_by_hand(scored: list) -> None:
    table = method_scores(scored)
    assert table["direct"][0] == pytest.approx(100 * (1 + 0 + 1 + 2 / 3) / 4)
    assert table["rag"][0] == pytest.approx(50.0)
    assert table["trustmargin"][0] == pytest.approx(100 * (1 + 1 + 1 + 2 / 3) / 4)
    assert table["no_prior"][0] == pytest.approx(50.0)          # picks RAG everywhere
    assert table["no_bind"][0] == pytest.approx(75.0)           # D, R, R, R
    assert table["oracle"] == pytest.approx((100 * (1 + 1 + 1 + 2 / 3) / 4, 75.0))
    assert table["direct"][1] == 50.0 and table["rag"][1] == 50.0
    assert table["trustmargin"][1] == 75.0


def test_arbitration_diagnostics_by_hand(scored: list) -> None:
    diag = arbitration_diagnostics(scored)
    assert diag.oracle_gap_f1 == pytest.approx(25.0)   # 91.67 - 66.67
    assert diag.oracle_gap_em == pytest.approx(25.0)   # 75 - 50
    assert diag.gap_closed_f1 == pytest.approx(100.0)
    assert (diag.n_d_better, diag.n_r_better) == (2, 1)
    assert diag.d_better_to_d == 100.0 and diag.r_better_to_r == 100.0
    # A threshold that always trusts retrieval loses both Direct-favored cases.
    permissive = arbitration_diagnostics(scored, tau=-10.0)
    assert permissive.d_better_to_d == 0.0 and permissive.r_better_to_r == 100.0
    assert permissive.gap_closed_f1 == pytest.approx(100 * (50 - 200 / 3) / 25)


def test_recovery_by_hand(scored: list) -> None:
    rec = disagreement_recovery(scored)
    assert rec["direct_favored"].n_cases == 2
    assert rec["direct_favored"].available == pytest.approx(100 * (1 + 2 / 3) / 4)
    assert rec["direct_favored"].ratio == pytest.approx(1.0)
    assert rec["rag_favored"].available == pytest.approx(25.0)
    never_rag = disagreement_recovery(scored, tau=100.0)
    assert never_rag["rag_favored"].realized == pytest.approx(0.0)
    assert never_rag["direct_favored"].ratio == pytest.approx(1.0)


def test_grid_extremes_collapse_to_single_sources(scored: list) -> None:
    grid = hyperparameter_grid({"a": scored}, lambdas=[0.5], taus=[-100.0, -1.5, 100.0])
    always_rag, default, always_direct = grid[0]
    assert always_rag == pytest.approx(50.0)            # agree case counts for both
    assert always_direct == pytest.approx(100 * (1 + 0 + 1 + 2 / 3) / 4)
    assert default == pytest.approx(method_scores(scored)["trustmargin"][0])
    # Two datasets average cell by cell.
    two = hyperparameter_grid({"a": scored, "b": scored[:2]}, lambdas=[0.5], taus=[100.0])
    assert two[0][0] == pytest.approx((always_direct + 50.0) / 2)
