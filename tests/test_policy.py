"""Policies (the rule package) and their selection from labeled questions (evaluation/policy*.py).

The labeled questions here are synthetic cached Decisions (the pattern of test_calibration.py):
margins drawn at random and gold answers set so that RAG always wins, or so that a known rule
is exactly right; the selection, the nested estimate and the learning curves read them exactly
as they read a real run (a real run of the embedded model is in test_policy_real_run.py).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation import domain_check
from trustmargin_integrations.evaluation import policy_selection as policy_module
from trustmargin_integrations.evaluation.diagnostics import GradedDecision, score_decision
from trustmargin_integrations.evaluation.domain_check import PolicyCheckResult, check_policy
from trustmargin_integrations.evaluation.learning_curve import curve_rows, curve_samples
from trustmargin_integrations.evaluation.policy_selection import (
    POLICY_KINDS,
    PolicyTable,
    select_policy,
)
from trustmargin_integrations.evaluation.rule_fit import Problem, assign_folds
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule import MarginPair, Policy, Verdict, apply_policy, settle_among
from trustmargin_integrations.rule.replay import replay
from trustmargin_integrations.schema import Decision

ALL_POLICIES = [Policy.paper(), Policy.fitted(1.2, -0.7), Policy.fitted(0.0, 0.25),
                Policy.bind_only(-3.0), Policy.bind_only(0.5), Policy.prior_only(-1.5),
                Policy.prior_only(1.0), Policy.always_rag(), Policy.always_direct()]


def _decision(m_prior: float, m_bind: float, *, reason: str | None = None) -> Decision:
    """A cached pairwise decision as the arbiter records it (made at the defaults)."""
    m = m_prior + 0.5 * m_bind
    return Decision.model_validate(dict(
        question="q", answer="Paris", source="direct",
        reason=reason or ("margin_above_tau" if m > -1.5 else "margin_at_or_below_tau"),
        direct_answer="Paris", rag_answer="Lyon", direct_generated=True, rag_generated=True,
        m_prior=None if reason else m_prior, m_bind=None if reason else m_bind,
        m=None if reason else m, lambda_bind=0.5, tau=-1.5, passages_given=3, passages_used=3,
        context_tokens=100, context_truncated=False, model_id="synthetic",
        prompt_version=PROMPT_VERSION))


def _questions(n: int, seed: int, gold: str, settled_every: int = 0) -> list[GradedDecision]:
    """``n`` scored questions with random margins; ``gold`` is "rag" (RAG's answer is always
    right), "direct" (Direct's is) or "rule" (RAG's exactly when M_prior + 1.2 M_bind > -0.7).
    """
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        p, b = float(rng.uniform(-4, 4)), float(rng.uniform(-3, 3))
        if settled_every and i % settled_every == 0:
            reason = ("no_evidence", "answers_agree")[i // settled_every % 2]
            out.append(score_decision(_decision(p, b, reason=reason), ["Lyon"]))
            continue
        rule = "Lyon" if p + 1.2 * b > -0.7 else "Paris"
        right = {"rag": "Lyon", "direct": "Paris"}.get(gold, rule)
        out.append(score_decision(_decision(p, b), [right]))
    return out


# -- the policy record ------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "field"), [
    (lambda: Policy.fitted(math.nan, -1.0), "policy.lambda_bind"),
    (lambda: Policy.fitted(0.5, math.inf), "policy.tau"),
    (lambda: Policy.bind_only(-math.inf), "policy.tau"),
    (lambda: Policy.prior_only(math.nan), "policy.tau"),
    (lambda: Policy.fitted(True, -1.0), "policy.lambda_bind"),
    (lambda: Policy.of("bind_only", lambda_bind=0.5, tau=-1.0), "policy.lambda_bind"),
    (lambda: Policy.of("always_rag", tau=0.0), "policy.tau"),
    (lambda: Policy.of("paper", 0.5, -1.5), "policy.kind"),  # one vocabulary: "rule"
    (lambda: Policy.of("sometimes_rag"), "policy.kind"),
])
def test_bad_policies_are_refused_with_a_typed_error(make: object, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        make()  # type: ignore[operator]
    assert info.value.field == field and info.value.fix


def test_paper_policy_carries_the_paper_numbers_and_serialises() -> None:
    paper = Policy.paper()
    assert (paper.lambda_bind, paper.tau) == (0.5, -1.5)
    assert paper == Policy.of("rule", 0.5, -1.5)
    assert Policy.bind_only(-3).label == "M_bind > -3"
    with pytest.raises(NotImplementedError, match="combines no margins"):
        Policy.always_rag().margin(0.0, 0.0)


# -- applying a policy ------------------------------------------------------------------------


def _by_hand(policy: Policy, margins: list[tuple[float, float] | None]) -> tuple[str, int | None]:
    """The policy's choice computed from its definition, without Policy.verdict."""
    if policy.kind == "always_direct":
        return "direct", None
    weight = policy.lambda_bind if policy.kind == "rule" else None
    scored = [(i, (p + weight * b) if weight is not None else (b if policy.kind == "bind_only"
                                                                 else p))
              for i, pair in enumerate(margins) if pair is not None for p, b in [pair]]
    best_i, best_m = max(scored, key=lambda im: (im[1], -im[0]))  # a tie keeps the earlier
    if policy.kind == "always_rag":
        paper = [(i, p + 0.5 * b) for i, pair in enumerate(margins) if pair is not None
                 for p, b in [pair]]
        return "rag", max(paper, key=lambda im: (im[1], -im[0]))[0]
    tau = policy.tau
    assert tau is not None
    return ("rag", best_i) if best_m > tau else ("direct", None)


def _pairs(margins: list[tuple[float, float] | None]) -> list[MarginPair | None]:
    return [None if m is None else MarginPair(*m) for m in margins]


MARGINS = [(-2.0, 1.0), (0.5, -3.5), (-4.0, 6.0), (1.0, 1.0), (-1.0, -1.0), (-1.25, -0.5)]


@pytest.mark.parametrize("policy", ALL_POLICIES, ids=lambda p: p.label)
def test_every_policy_agrees_with_the_rule_by_hand(policy: Policy) -> None:
    cases: list[list[tuple[float, float] | None]] = [[m] for m in MARGINS]
    cases += [list(c) for c in itertools.permutations(MARGINS[:4], 3)]  # several candidates
    cases += [[None, MARGINS[0], None, MARGINS[2]], [MARGINS[3], MARGINS[3]]]  # blank, tie
    for margins in cases:
        out = apply_policy(policy, _pairs(margins))
        assert (out.choice, out.candidate) == _by_hand(policy, margins), margins
        assert out.paper == Policy.paper().verdict(_pairs(margins))  # the audit's paper verdict
        assert out.agrees_with_paper == ((out.choice, out.candidate)
                                         == _by_hand(Policy.paper(), margins))
        assert out.reason.startswith("policy_always_") == (not policy.uses_margins)


def test_settled_questions_keep_their_outcome_except_under_a_single_source() -> None:
    no_evidence = settle_among(has_evidence=False, direct_blank=False, rag_blank=[False, False],
                               agree_unscored=[False, False])
    agree = settle_among(has_evidence=True, direct_blank=False, rag_blank=[True, False],
                         agree_unscored=[False, True])
    assert isinstance(no_evidence, Verdict) and isinstance(agree, Verdict)
    for policy in ALL_POLICIES:
        for settled in (no_evidence, agree):
            out = apply_policy(policy, [None, None], settled)
            assert out.paper == settled
            if policy.kind == "always_rag":
                assert (out.choice, out.candidate) == ("rag", settled.candidate or 0)
            elif policy.kind == "always_direct":
                assert (out.choice, out.candidate) == ("direct", None)
            else:
                assert (out.choice, out.candidate, out.rule) == (
                    settled.choice, settled.candidate, settled)


def test_the_table_replays_every_policy_as_apply_policy_does() -> None:
    scored = _questions(90, seed=1, gold="rule", settled_every=7)
    table = PolicyTable({"a": scored})
    for policy in ALL_POLICIES:
        rag = table.chooses_rag(policy, range(len(scored)))
        for s, picked in zip(scored, rag, strict=True):
            d = s.decision
            settled = (Verdict(replay(d), d.reason) if d.m_prior is None else None)
            margins = [None] if settled else [MarginPair(d.m_prior, d.m_bind)]
            assert picked == (apply_policy(policy, margins, settled).choice == "rag")
        assert table.score(policy, range(len(scored))) == pytest.approx(
            np.mean([s.f1("rag" if r else "direct") for s, r in zip(scored, rag, strict=True)]))


# -- selection --------------------------------------------------------------------------------


def test_check_says_use_rag_where_rag_always_wins() -> None:
    table = PolicyTable({"rag_world": _questions(120, seed=2, gold="rag")})
    result = check_policy(table, resamples=1000, selection_resamples=500)
    assert result.chosen == Policy.always_rag() and not result.keeps_trustmargin
    assert result.verdict.startswith("Use RAG: on your 120 questions")
    assert result.candidates["always_rag"].f1.mean == 100.0
    assert result.rule_vs_fallback.versus == "always_rag" and result.rule_vs_fallback.high <= 0
    assert all(f.chosen == Policy.always_rag() for f in result.nested.folds)
    assert result.nested.versus_fallback.mean == 0.0


def test_check_says_use_direct_only_where_direct_wins_significantly() -> None:
    table = PolicyTable({"closed_book": _questions(100, seed=11, gold="direct")})
    result = check_policy(table, resamples=1000, selection_resamples=500)
    assert result.chosen == result.fallback == Policy.always_direct()
    assert result.verdict.startswith("Use Direct: on your 100 questions")
    # Where Direct and RAG are each right half the time, plain RAG stays the fallback.
    mixed = _questions(50, seed=12, gold="direct") + _questions(50, seed=13, gold="rag")
    even = check_policy(PolicyTable({"even": mixed}), resamples=1000, selection_resamples=500)
    assert even.fallback == Policy.always_rag()
    assert even.candidates["always_direct"].f1.mean == even.candidates["always_rag"].f1.mean


def test_check_keeps_trustmargin_where_the_rule_wins() -> None:
    table = PolicyTable({"a": _questions(150, seed=3, gold="rule"),
                         "b": _questions(110, seed=4, gold="rule")})
    result = check_policy(table, resamples=1000, selection_resamples=500)
    assert result.keeps_trustmargin and result.chosen == result.candidates["fitted"].policy
    assert result.chosen.lambda_bind == pytest.approx(1.2, abs=0.31)
    assert result.rule_vs_fallback.low > 0
    assert result.verdict.startswith("Keep TrustMargin (fitted")
    assert result.nested.versus_fallback.low > 0 and not result.small_sample
    assert result.sizes == {"a": 150, "b": 110} and result.n == 260
    again = PolicyCheckResult.model_validate_json(result.model_dump_json())
    assert again == result


def test_a_small_check_says_so() -> None:
    table = PolicyTable({"a": _questions(30, seed=5, gold="rule")})
    result = check_policy(table, resamples=300, selection_resamples=200)
    assert result.small_sample and "Small sample" in result.verdict
    with pytest.raises(InvalidInputError, match="too few"):
        check_policy(table, range(8))


def test_selection_never_sees_the_questions_it_is_scored_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scored = _questions(80, seed=6, gold="rule") + _questions(45, seed=7, gold="rag")
    table = PolicyTable({"a": scored[:80], "b": scored[80:]})
    selections: list[set[int]] = []  # the questions of each selection, in call order
    fits: list[tuple[set[int], set[int]]] = []  # (selection's questions, fit's questions)
    open_selection: list[set[int]] = []
    real_select, real_fit = select_policy, Problem.fit

    def spy_select(t: PolicyTable, index: object, **kw: object) -> object:
        seen = {int(q) for q in index}  # type: ignore[attr-defined]
        selections.append(seen)
        open_selection.append(seen)
        try:
            return real_select(t, index, **kw)  # type: ignore[arg-type]
        finally:
            open_selection.pop()

    def spy_fit(self: Problem, index: object = None) -> object:
        fits.append((open_selection[-1], {int(q) for q in index}))  # type: ignore[attr-defined]
        return real_fit(self, index)  # type: ignore[arg-type]

    monkeypatch.setattr(domain_check, "select_policy", spy_select)
    monkeypatch.setattr(Problem, "fit", spy_fit)
    result = check_policy(table, folds=4, seed=3, resamples=300, selection_resamples=200)
    everything = set(range(len(table)))
    # The final selection on all questions, then one per outer fold on the other folds.
    outer = assign_folds(table.dataset_names, 4, 3)
    assert selections[0] == everything and len(selections) == 5
    for k, seen in enumerate(selections[1:]):
        test = {q for q in everything if outer[q] == k}
        assert seen == everything - test and len(test) == result.nested.folds[k].n_test
    # Inside a selection, the four inner fits leave out one fold each, the last fits it all.
    for seen in selections:
        own = [fit for owner, fit in fits if owner is seen]
        assert len(own) == 5 and own[-1] == seen
        held = [seen - fit for fit in own[:-1]]
        assert all(h for h in held) and set.union(*held) == seen
        assert sum(len(h) for h in held) == len(seen)  # the held-out folds are disjoint


def test_learning_curve_selects_on_the_sample_and_scores_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    table = PolicyTable({"a": _questions(60, seed=8, gold="rule"),
                         "b": _questions(140, seed=9, gold="rag")})
    seen: list[set[int]] = []
    real = policy_module.fit_candidates

    def spy(t: PolicyTable, index: object) -> object:
        seen.append({int(q) for q in index})  # type: ignore[attr-defined]
        return real(t, index)  # type: ignore[arg-type]

    monkeypatch.setattr(policy_module, "fit_candidates", spy)
    samples = curve_samples(table, "b", sizes=(25, 50, 200), seeds=3, resamples=200)
    members = set(range(60, 200))
    assert [(s.size, s.seed) for s in samples] == [(25, 0), (25, 1), (25, 2), (50, 0),
                                                   (50, 1), (50, 2)]  # 200 >= 140: skipped
    for s in samples:
        sample, rest = set(s.sample), set(s.rest)
        assert len(sample) == s.size and not sample & rest and sample | rest == members
        assert s.rest_scores["always_rag"] == 100.0 and s.chosen["superior"] == "always_rag"
    assert all(fit <= set(s.sample) for s in samples[:1] for fit in seen[:6])
    assert len(seen) == 6 * len(samples)
    for fit, s in zip(seen[5::6], samples, strict=True):
        assert fit == set(s.sample)  # each selection's final fit: its sample, nothing else
    rows = curve_rows(samples)
    assert [(r.size, r.criterion) for r in rows][:3] == [(25, "superior"), (25, "noninferior"),
                                                          (25, "point")]
    assert all(r.regret >= 0 and r.n_rest == 140 - r.size for r in rows)
    assert all(r.worse_than_single == 0.0 for r in rows if r.criterion == "superior")


def test_every_kind_is_a_candidate() -> None:
    table = PolicyTable({"a": _questions(40, seed=10, gold="rule")})
    selection = select_policy(table, range(40), resamples=100)
    assert set(selection.policies) == set(POLICY_KINDS) == set(selection.held_out)
