"""The one decision rule (rule/policies.py, ``Policy.verdict``) against hand-computed
values, and its three users: the arbiter's verdict, its replay (rule.replay: the lambda x tau
grid) and kept_rag."""

from __future__ import annotations

import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.rule import (
    SETTLED,
    MarginPair,
    Policy,
    Verdict,
    compute_margins,
    settle,
    settle_among,
)
from trustmargin_integrations.rule.replay import kept_rag, replay
from trustmargin_integrations.schema import Decision, ViewLikelihoods


def views(q: float, qc: float, c: float) -> ViewLikelihoods:
    return ViewLikelihoods(question_only=q, question_context=qc, context_only=c, num_tokens=3)


def verdict_of(m_prior: float, m_bind: float, lambda_bind: float, tau: float,
           kind: str = "rule") -> Verdict:
    """The verdict of the policy ``kind`` over one candidate's margins."""
    return Policy.of(kind, lambda_bind, tau, drop_unused=True).verdict(
        [MarginPair(m_prior, m_bind)])


def test_margins_match_hand_computation() -> None:
    # l_D(y_D)=-0.5, l_R(y_D)=-1.0, l_C(y_D)=-2.0 ; l_D(y_R)=-1.5, l_R(y_R)=-0.2, l_C(y_R)=-0.4
    m = compute_margins(views(-0.5, -1.0, -2.0), views(-1.5, -0.2, -0.4), lambda_bind=0.5)
    assert m.m_prior == pytest.approx(-1.0)  # -1.5 - (-0.5)
    assert m.m_bind == pytest.approx(-0.8)  # (-0.2 + 0.4) - (-1.0 + 2.0) = 0.2 - 1.0
    assert m.m == pytest.approx(-1.4)  # -1.0 + 0.5 * -0.8
    assert verdict_of(m.m_prior, m.m_bind, 0.5, tau=-1.5).choice == "rag"
    assert verdict_of(m.m_prior, m.m_bind, 0.5, tau=-1.0).choice == "direct"


def test_lambda_weights_only_the_binding_margin() -> None:
    base = compute_margins(views(-1, -1, -1), views(-2, -0.5, -1.5), lambda_bind=0.0)
    assert base.m == pytest.approx(base.m_prior) == pytest.approx(-1.0)
    weighted = compute_margins(views(-1, -1, -1), views(-2, -0.5, -1.5), lambda_bind=2.0)
    assert weighted.m_bind == pytest.approx(1.0)
    assert weighted.m == pytest.approx(-1.0 + 2.0 * 1.0)


def test_tie_at_tau_keeps_direct() -> None:
    # M exactly equal to tau must keep the Direct answer (strict inequality in the paper).
    verdict = verdict_of(-1.5, 0.0, 0.5, tau=-1.5)
    assert (verdict.choice, verdict.reason) == ("direct", "margin_at_or_below_tau")
    assert verdict_of(-1.5 + 1e-9, 0.0, 0.5, tau=-1.5).choice == "rag"


def test_ablations_drop_one_margin() -> None:
    assert verdict_of(-3.0, 4.0, 0.5, -1.5, "weighted_bind").margins.m == pytest.approx(2.0)  # type: ignore[union-attr]
    assert verdict_of(-3.0, 4.0, 0.5, -1.5, "prior_only").choice == "direct"
    for old in ("no_prior", "no_bind", "full", "paper", "fitted"):  # no second vocabulary
        with pytest.raises(InvalidInputError, match="unknown policy"):
            verdict_of(0.0, 0.0, 0.5, 0.0, old)


def test_identical_answers_have_zero_margins() -> None:
    m = compute_margins(views(-0.7, -0.3, -0.9), views(-0.7, -0.3, -0.9), lambda_bind=0.5)
    assert (m.m_prior, m.m_bind, m.m) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"has_evidence": False, "direct_blank": True, "rag_blank": True}, "no_evidence"),
        ({"direct_blank": True, "rag_blank": True}, "both_answers_blank"),
        ({"rag_blank": True}, "rag_answer_blank"),
        ({"direct_blank": True}, "direct_answer_blank"),
        ({"agree_unscored": True}, "answers_agree"),
        ({}, None),
    ],
)
def test_settled_cases_need_no_likelihoods(flags: dict, expected: str | None) -> None:
    args = {"has_evidence": True, "direct_blank": False, "rag_blank": False,
            "agree_unscored": False, **flags}
    verdict = settle(**args)
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None and verdict.reason == expected
        assert verdict.choice == SETTLED[expected]


@pytest.mark.parametrize(
    ("direct_blank", "blank", "agree", "expected", "candidate"),
    [
        (False, [True, True], [False, False], "rag_answer_blank", None),
        (True, [True, True], [False, False], "both_answers_blank", None),
        (True, [True, False, False], [False, False, False], "direct_answer_blank", 1),
        (False, [True, False, False], [False, True, True], "answers_agree", 1),
        (False, [False, False], [True, False], None, None),  # one disagrees: score it
        (False, [True, False], [False, False], None, None),
    ],
)
def test_settle_among_several_candidates(direct_blank: bool, blank: list[bool],
                                         agree: list[bool], expected: str | None,
                                         candidate: int | None) -> None:
    verdict = settle_among(has_evidence=True, direct_blank=direct_blank, rag_blank=blank,
                           agree_unscored=agree)
    if expected is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert (verdict.reason, verdict.choice, verdict.candidate) == (
            expected, SETTLED[expected], candidate)  # type: ignore[index]
    no_evidence = settle_among(has_evidence=False, direct_blank=direct_blank,
                               rag_blank=blank, agree_unscored=agree)
    assert no_evidence is not None and (no_evidence.reason, no_evidence.candidate) == (
        "no_evidence", None)


def _decision(**fields: object) -> Decision:
    base = dict(question="q", answer="a", source="direct", reason="margin_at_or_below_tau",
                direct_answer="a", rag_answer="b", direct_generated=False, rag_generated=False,
                lambda_bind=0.5, tau=-1.5, passages_given=1, passages_used=1,
                context_tokens=5, context_truncated=False, model_id="m", prompt_version="v")
    return Decision.model_validate({**base, **fields})


def test_replay_uses_the_same_rule_and_keeps_settled_outcomes() -> None:
    d = _decision(m_prior=-1.0, m_bind=-0.8, m=-1.4, source="rag", reason="margin_above_tau")
    assert replay(d) == "rag" and kept_rag(d)
    assert replay(d, tau=-1.0) == "direct"
    assert replay(d, lambda_bind=0.0, tau=-1.2) == "rag"  # M = -1.0
    assert replay(d, kind="prior_only", tau=-1.1) == "rag"  # M = M_prior = -1.0
    assert replay(d, kind="prior_only", tau=-0.9) == "direct"
    settled = _decision(reason="no_evidence")
    assert replay(settled, tau=-100.0) == "direct" and not kept_rag(settled)
    assert kept_rag(_decision(reason="answers_agree", source="agree"))
    with pytest.raises(ValueError, match="no margins"):
        replay(_decision())
