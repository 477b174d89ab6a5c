"""The rule on given margins: every policy, the multi-candidate argmax, settled cases, and
policies refused with the field and the fix named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.rule import (
    AlwaysDirect,
    AlwaysRag,
    BindOnly,
    MarginPair,
    Margins,
    Policy,
    PriorOnly,
    Rule,
    WeightedBind,
    apply_policy,
    compute_margins,
    settle_among,
)
from trustmargin_integrations.schema import ViewLikelihoods


def test_margins_are_the_papers_differences() -> None:
    direct = ViewLikelihoods(question_only=-1.0, question_context=-3.0, context_only=-2.5,
                             num_tokens=2)
    rag = ViewLikelihoods(question_only=-2.0, question_context=-0.5, context_only=-1.5,
                          num_tokens=2)
    # M_prior = -2 - (-1); M_bind = (-0.5 + 1.5) - (-3 + 2.5) = 1.5; M = -1 + 0.25 * 1.5
    assert compute_margins(direct, rag, 0.25) == Margins(m_prior=-1.0, m_bind=1.5, m=-0.625)


@pytest.mark.parametrize(("policy", "pair", "m", "choice"), [
    (Policy.paper(), MarginPair(-1.0, 1.0), -0.5, "rag"),
    (Policy.paper(), MarginPair(-2.0, 1.0), -1.5, "direct"),  # M == tau keeps Direct
    (Policy.paper(), MarginPair(-2.0, -1.0), -2.5, "direct"),
    (Policy.fitted(2.0, 0.0), MarginPair(-1.0, 0.75), 0.5, "rag"),
    (PriorOnly(tau=-1.0), MarginPair(-0.5, -9.0), -0.5, "rag"),
    (PriorOnly(tau=-1.0), MarginPair(-1.5, 9.0), -1.5, "direct"),
    (BindOnly(tau=-3.0), MarginPair(-9.0, -2.0), -2.0, "rag"),
    (BindOnly(tau=-3.0), MarginPair(9.0, -3.0), -3.0, "direct"),
    (WeightedBind(lambda_bind=0.5, tau=-1.0), MarginPair(-9.0, -1.0), -0.5, "rag"),
    (WeightedBind(lambda_bind=0.5, tau=-1.0), MarginPair(9.0, -4.0), -2.0, "direct"),
])
def test_each_margin_policy_compares_its_own_m_with_tau(
        policy: Policy, pair: MarginPair, m: float, choice: str) -> None:
    verdict = policy.verdict([pair])
    assert verdict.margins is not None
    assert verdict.margins.m == pytest.approx(m)
    assert verdict.choice == choice
    assert verdict.reason == ("margin_above_tau" if choice == "rag" else "margin_at_or_below_tau")
    assert verdict.candidate == 0
    assert verdict.kept == (0 if choice == "rag" else None)


def test_the_vectorised_rule_agrees_with_verdict() -> None:
    m_prior = np.array([-1.0, -2.0, 0.5, -3.0])
    m_bind = np.array([1.0, 1.0, -5.0, 4.0])
    policy = Policy.paper()
    looped = [policy.verdict([MarginPair(p, b)]).choice == "rag"
              for p, b in zip(m_prior, m_bind, strict=True)]
    assert policy.keeps_rag(m_prior, m_bind).tolist() == looped == [True, False, False, True]


def test_the_grid_is_every_lambda_and_tau() -> None:
    grid = Rule.keeps_rag_grid(-1.0, 2.0, [0.0, 1.0], [-1.5, 0.5, 1.0])
    # M = -1 at lambda 0 and 1 at lambda 1, each compared with every tau (strictly).
    assert grid.tolist() == [[True, False, False], [True, True, False]]


def test_several_candidates_keep_the_largest_m() -> None:
    verdict = Policy.paper().verdict([MarginPair(-3.0, 0.0), MarginPair(-1.0, 1.0),
                                     MarginPair(0.0, -1.0)])
    assert (verdict.choice, verdict.candidate) == ("rag", 1)
    assert verdict.margins == Margins(-1.0, 1.0, -0.5)


def test_a_tie_keeps_the_earlier_candidate() -> None:
    verdict = Policy.paper().verdict([None, MarginPair(-1.0, 0.0), MarginPair(-0.5, -1.0)])
    assert verdict.candidate == 1


def test_a_nan_margin_cannot_block_a_real_one() -> None:
    verdict = Policy.paper().verdict([MarginPair(math.nan, 0.0), MarginPair(-1.0, 0.0)])
    assert (verdict.choice, verdict.candidate) == ("rag", 1)


def test_a_direct_kept_by_margins_still_names_the_best_candidate() -> None:
    verdict = Policy.paper().verdict([MarginPair(-9.0, 0.0), MarginPair(-4.0, 0.0)])
    assert (verdict.choice, verdict.candidate, verdict.kept) == ("direct", 1, None)


def test_no_candidate_with_margins_is_an_error() -> None:
    with pytest.raises(ValueError, match="settle"):
        Policy.paper().verdict([None, None])


def test_single_sources_ignore_the_margins_but_audit_the_rule() -> None:
    low = [MarginPair(-9.0, 0.0)]
    rag = apply_policy(AlwaysRag(), low)
    assert (rag.choice, rag.candidate, rag.reason) == ("rag", 0, "policy_always_rag")
    assert rag.paper.choice == "direct"
    assert not rag.agrees_with_paper
    direct = apply_policy(AlwaysDirect(), [MarginPair(1.0, 1.0)])
    assert (direct.choice, direct.candidate, direct.paper.choice) == ("direct", None, "rag")


def test_always_rag_with_several_candidates_keeps_the_rules_best() -> None:
    verdict = apply_policy(AlwaysRag(), [MarginPair(-5.0, 0.0), MarginPair(-4.0, 0.0)])
    assert verdict.candidate == 1


@pytest.mark.parametrize(("policy", "candidates", "expected"), [
    (AlwaysDirect(), 1, ("direct", None)),
    (AlwaysDirect(), 3, ("direct", None)),
    (AlwaysRag(), 1, ("rag", 0)),
    (AlwaysRag(), 2, None),
    (Policy.paper(), 1, None),
])
def test_which_policies_need_no_scoring(policy: Policy, candidates: int,
                                         expected: tuple[str, int | None] | None) -> None:
    verdict = policy.unscored(candidates)
    assert (None if verdict is None else (verdict.choice, verdict.candidate)) == expected


@pytest.mark.parametrize(("evidence", "direct_blank", "rag_blank", "agree", "expected"), [
    (False, False, [False], [False], ("direct", "no_evidence", None)),
    (True, True, [True], [False], ("direct", "both_answers_blank", None)),
    (True, False, [True, True], [False, False], ("direct", "rag_answer_blank", None)),
    (True, True, [True, False], [False, False], ("rag", "direct_answer_blank", 1)),
    (True, False, [False, True], [True, False], ("rag", "answers_agree", 0)),
    (True, False, [False, False], [True, False], None),
    (True, False, [False], [False], None),
])
def test_settled_questions(evidence: bool, direct_blank: bool, rag_blank: list[bool],
                           agree: list[bool], expected: tuple[str, str, int | None] | None
                           ) -> None:
    verdict = settle_among(has_evidence=evidence, direct_blank=direct_blank,
                           rag_blank=rag_blank, agree_unscored=agree)
    got = None if verdict is None else (verdict.choice, verdict.reason, verdict.candidate)
    assert got == expected


def test_a_settled_verdict_stands_under_a_margin_policy_not_under_a_single_source() -> None:
    settled = settle_among(has_evidence=True, direct_blank=False, rag_blank=[False],
                           agree_unscored=[True])
    assert apply_policy(BindOnly(tau=100.0), [None], settled).rule == settled
    assert apply_policy(AlwaysDirect(), [None], settled).choice == "direct"


@pytest.mark.parametrize(("kind", "lam", "tau", "field", "fix"), [
    ("median", None, None, "policy.kind", "use one of rule"),
    ("bind_only", 0.5, -1.0, "policy.lambda_bind", "leave lambda_bind unset"),
    ("rule", 0.5, math.inf, "policy.tau", "pass a finite tau"),
    ("rule", 0.5, None, "policy.tau", "pass tau as a float"),
    ("paper", 1.0, -1.5, "policy.kind", "use one of rule"),
])
def test_bad_policies_name_the_field_and_the_fix(kind: str, lam: float | None,
                                                 tau: float | None, field: str, fix: str
                                                 ) -> None:
    with pytest.raises(InvalidInputError) as err:
        Policy.of(kind, lam, tau)
    assert err.value.field == field
    assert fix in err.value.fix


def test_old_names_are_refused_and_the_fix_names_the_policies() -> None:
    # 0.1.0 keeps no aliases: an old variant name is an error naming the real ones.
    for old in ("no_bind", "paper", "full"):
        with pytest.raises(InvalidInputError) as err:
            Policy.of(old, tau=-1.0)
        assert err.value.field == "policy.kind" and "prior_only" in err.value.fix
    assert Policy.from_setting("bind_only", 0.5, -2.0) == BindOnly(tau=-2.0)


def test_a_policy_writes_and_reads_its_record() -> None:
    policy = WeightedBind(lambda_bind=0.25, tau=-0.5)
    assert policy.record() == {"kind": "weighted_bind", "lambda_bind": 0.25, "tau": -0.5}
    assert Policy.of(**{k: v for k, v in policy.record().items()}) == policy
    assert policy.setting == {"policy": "weighted_bind", "lambda_bind": 0.25, "tau": -0.5}
    assert policy.label == "0.25 * M_bind > -0.5"
