"""Margin arithmetic and the decision rule against hand-computed values."""

from __future__ import annotations

import pytest

from trustmargin_integrations.margins import compute_margins, prefers_rag


def test_margins_match_hand_computation() -> None:
    # l_D(y_D)=-0.5, l_R(y_D)=-1.0, l_C(y_D)=-2.0 ; l_D(y_R)=-1.5, l_R(y_R)=-0.2, l_C(y_R)=-0.4
    m = compute_margins(-0.5, -1.0, -2.0, -1.5, -0.2, -0.4, lambda_bind=0.5)
    assert m.m_prior == pytest.approx(-1.0)  # -1.5 - (-0.5)
    assert m.m_bind == pytest.approx(-0.8)  # (-0.2 + 0.4) - (-1.0 + 2.0) = 0.2 - 1.0
    assert m.m == pytest.approx(-1.4)  # -1.0 + 0.5 * -0.8
    assert prefers_rag(m.m, tau=-1.5)
    assert not prefers_rag(m.m, tau=-1.0)


def test_lambda_weights_only_the_binding_margin() -> None:
    base = compute_margins(-1, -1, -1, -2, -0.5, -1.5, lambda_bind=0.0)
    assert base.m == pytest.approx(base.m_prior) == pytest.approx(-1.0)
    weighted = compute_margins(-1, -1, -1, -2, -0.5, -1.5, lambda_bind=2.0)
    assert weighted.m_bind == pytest.approx(1.0)
    assert weighted.m == pytest.approx(-1.0 + 2.0 * 1.0)


def test_tie_at_tau_keeps_direct() -> None:
    # M exactly equal to tau must keep the Direct answer (strict inequality in the paper).
    m = compute_margins(-1.0, -1.0, -1.0, -2.5, -1.0, -1.0, lambda_bind=0.5)
    assert m.m == -1.5
    assert not prefers_rag(m.m, tau=-1.5)
    assert prefers_rag(m.m + 1e-9, tau=-1.5)


def test_identical_answers_have_zero_margins() -> None:
    m = compute_margins(-0.7, -0.3, -0.9, -0.7, -0.3, -0.9, lambda_bind=0.5)
    assert (m.m_prior, m.m_bind, m.m) == (0.0, 0.0, 0.0)
