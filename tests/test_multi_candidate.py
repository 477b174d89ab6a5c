"""Arbitration among several RAG candidates: the rule (Policy.verdict), its records and
replay, and the arbiter on the real model, checked against pairwise arbitration."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trustmargin_integrations import InvalidInputError, TrustMargin, TrustMarginConfig
from trustmargin_integrations.backends.base import (
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    StopPredicate,
)
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.demo import demo_corpus
from trustmargin_integrations.rule import MarginPair, Policy, Verdict, compute_margins
from trustmargin_integrations.rule.replay import replay, replay_answer, replay_winner
from trustmargin_integrations.schema import Decision, ViewLikelihoods

# -- helpers --------------------------------------------------------------------------------

CORPUS = {p.id: p for p in demo_corpus()}
ZELVORA = [CORPUS["p00"], CORPUS["p01"], CORPUS["p02"]]
ORREL = [CORPUS["p04"], CORPUS["p05"], CORPUS["p03"]]
Q_ZELVORA = "Who designed the Zelvora Bridge?"
Q_ORREL = "What is the capital of Saint Orrel?"
VIEWS = ("question_only", "question_context", "context_only")


class SpySession:
    """Forwards to the real session and records every generate and score call."""

    def __init__(self, inner: ModelSession, spy: Spy) -> None:
        self.inner, self.spy = inner, spy

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        self.spy.generated.append(list(prompts))
        return self.inner.generate(prompts, max_new_tokens, stop=stop)

    def score(self, requests: Sequence[ContinuationRequest]) -> list[ContinuationScore]:
        self.spy.scored.append(list(requests))
        return self.inner.score(requests)


class Spy:
    """A backend wrapper that records what the arbiter asks of the model."""

    def __init__(self, backend: HFBackend) -> None:
        self.backend = backend
        self.generated: list[list[str]] = []
        self.scored: list[list[ContinuationRequest]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    @contextmanager
    def session(self) -> Iterator[ModelSession]:
        with self.backend.session() as inner:
            yield SpySession(inner, self)


KINDS = ("rule", "weighted_bind", "prior_only")
"""The margin rule and its two ablations (w/o M_prior, w/o M_bind)."""


def verdict_of(margins: Sequence[tuple[float, float] | None], lam: float, tau: float,
                 kind: str = "rule") -> Verdict:
    """:meth:`Policy.verdict` of the policy ``kind`` over ``(M_prior, M_bind)`` tuples."""
    return Policy.of(kind, lam, tau, drop_unused=True).verdict(
        [None if m is None else MarginPair(*m) for m in margins])


def by_hand(margins: Sequence[tuple[float, float] | None], lam: float, tau: float,
            kind: str = "rule") -> int | None:
    """The documented rule, written out independently: the index kept, None for Direct."""
    best, best_m = None, -math.inf
    for i, pair in enumerate(margins):
        if pair is None:
            continue
        m = {"rule": pair[0] + lam * pair[1], "weighted_bind": lam * pair[1],
             "prior_only": pair[0]}[kind]
        if best is None or m > best_m:
            best, best_m = i, m
    return best if best is not None and best_m > tau else None


def assert_views(got: ViewLikelihoods | None, want: ViewLikelihoods | None, tol: float) -> None:
    assert got is not None and want is not None
    for view in VIEWS:
        assert getattr(got, view) == pytest.approx(getattr(want, view), abs=tol), view
    assert got.num_tokens == want.num_tokens


def fp32(value: float) -> float:
    """Scoring noise of one likelihood between two fast-path runs that pack different
    answers together: 5e-5, or 1e-5 relative for large values. Pairwise runs of the same
    pair, batched or alone, already differ by up to 5e-6 at l = -7 in fp32 on an AVX2 CPU,
    and by 1.1e-5 at l = -2.05 on an AVX-512 Xeon (2026-11-26: another kernel, another
    summation order). Still five times tighter than the project's 1e-4 promise against a
    plain forward pass, and far below what a wrongly packed or masked answer changes (> 1e-2)."""
    return max(5e-5, 1e-5 * abs(value))


def assert_same_scores(got: ViewLikelihoods | None, want: ViewLikelihoods | None) -> None:
    assert got is not None and want is not None
    for view in VIEWS:
        expected = getattr(want, view)
        assert getattr(got, view) == pytest.approx(expected, abs=fp32(expected)), view
    assert got.num_tokens == want.num_tokens


# -- one candidate is the pairwise rule -----------------------------------------------------

PAIRS = [  # (question, passages, direct, rag): scored ones first, then settled ones
    (Q_ZELVORA, ZELVORA, "Isambard Brunel", "Marta Okonkwo"),
    (Q_ZELVORA, ZELVORA, "Marta Okonkwo", "Gustave Eiffel"),
    (Q_ORREL, ORREL, "Port Louis", "Port Mireaux"),
    ("On which island is the quillon fruit mainly grown?", ORREL, "Sicily", "Saint Orrel"),
    (Q_ORREL, ORREL, "Port Mireaux.", "port mireaux"),  # answers agree
    (Q_ORREL, ORREL, "Port Louis", "  "),  # blank RAG answer
]


@pytest.mark.slow
def test_one_candidate_is_the_pairwise_rule(backend: HFBackend) -> None:
    # tau = 1.0 puts these questions on both sides of the threshold (checked below). Several
    # candidates are cut to their short answers, so the pairs are too.
    tm = TrustMargin(backend, TrustMarginConfig(tau=1.0, scoring_form="paper"))
    pairwise = tm.arbitrate_batch([{"question": q, "passages": p, "direct_answer": d,
                                    "rag_answer": r} for q, p, d, r in PAIRS])
    listed = tm.arbitrate_batch([{"question": q, "passages": p, "direct_answer": d,
                                  "rag_candidates": [r]} for q, p, d, r in PAIRS])
    assert {d.source for d in pairwise} >= {"direct", "rag", "agree"}
    for old, new in zip(pairwise, listed, strict=True):
        assert (new.answer, new.source, new.reason) == (old.answer, old.source, old.reason)
        assert replay(new) == replay(old)
        assert new.rag_answer == old.rag_answer and new.direct_answer == old.direct_answer
        for key in ("m_prior", "m_bind", "m"):
            if getattr(old, key) is None:
                assert getattr(new, key) is None
            else:
                assert getattr(new, key) == pytest.approx(getattr(old, key), abs=1e-6)
        if old.rag_likelihoods is None:
            assert new.rag_likelihoods is None and new.rag_candidates[0].likelihoods is None
        else:
            assert_views(new.direct_likelihoods, old.direct_likelihoods, 1e-6)
            assert_views(new.rag_likelihoods, old.rag_likelihoods, 1e-6)
            assert_views(new.rag_candidates[0].likelihoods, old.rag_likelihoods, 1e-6)
        assert len(new.rag_candidates) == 1
        assert new.winner == (0 if replay(old) == "rag" else None)
        # The pairwise record is unchanged: the new fields do not appear in its JSON.
        keys = set(json.loads(old.model_dump_json()))
        assert not keys & {"rag_candidates", "winner"}
        assert set(json.loads(new.model_dump_json())) - keys <= {"rag_candidates", "winner"}


# -- several candidates: each scored as in its pairwise arbitration -------------------------

MULTI = [  # the winner is not the first candidate, so an index mix-up cannot pass
    (Q_ZELVORA, ZELVORA, "Isambard Brunel",
     {"ircot": "Gustave Eiffel", "dtr": "Okonkwo", "bm25": "Marta Okonkwo"}),
    (Q_ORREL, ORREL, "Port Louis", {"ircot": "Port Mireaux", "bm25": "Saint Orrel"}),
]


@pytest.fixture(scope="module")
def multi(backend: HFBackend) -> tuple[list[Decision], list[list[Decision]], Spy]:
    """Multi-candidate decisions, the pairwise decision of each candidate, and the spy."""
    spy = Spy(backend)
    tm = TrustMargin(spy)  # type: ignore[arg-type]
    decisions = tm.arbitrate_batch([{"question": q, "passages": p, "direct_answer": d,
                                     "rag_candidates": c} for q, p, d, c in MULTI])
    # The pairwise rule on the same compared forms (several candidates are each cut to their
    # short answer, so the pairs are too).
    pair_tm = TrustMargin(backend, TrustMarginConfig(scoring_form="paper"))
    pairwise = [
        pair_tm.arbitrate_batch([{"question": q, "passages": p, "direct_answer": d,
                                  "rag_answer": text} for text in c.values()])
        for q, p, d, c in MULTI
    ]
    return decisions, pairwise, spy


def test_candidates_are_scored_as_in_pairwise_arbitration(
    multi: tuple[list[Decision], list[list[Decision]], Spy]
) -> None:
    decisions, pairwise, spy = multi
    for (_, _, _, candidates), d, pairs in zip(MULTI, decisions, pairwise, strict=True):
        assert [c.name for c in d.rag_candidates] == list(candidates)
        assert [c.answer for c in d.rag_candidates] == list(candidates.values())
        assert d.direct_likelihoods is not None
        for record, pair in zip(d.rag_candidates, pairs, strict=True):
            assert record.likelihoods is not None and pair.rag_likelihoods is not None
            assert_same_scores(record.likelihoods, pair.rag_likelihoods)
            assert_same_scores(d.direct_likelihoods, pair.direct_likelihoods)
            # The record's margins are its own likelihoods' margins...
            own = compute_margins(d.direct_likelihoods, record.likelihoods, 0.5)
            assert (record.m_prior, record.m_bind, record.m) == (own.m_prior, own.m_bind,
                                                                 own.m)
            # ...and the pairwise ones up to the likelihoods' noise: M_prior sums two of
            # them, M_bind four, M = M_prior + 0.5 * M_bind.
            assert pair.m_prior is not None and pair.m_bind is not None and pair.m is not None
            r, dl = pair.rag_likelihoods, d.direct_likelihoods
            prior_tol = fp32(r.question_only) + fp32(dl.question_only)
            bind_tol = sum(fp32(getattr(x, v)) for x in (r, dl)
                           for v in ("question_context", "context_only"))
            assert record.m_prior == pytest.approx(pair.m_prior, abs=prior_tol)
            assert record.m_bind == pytest.approx(pair.m_bind, abs=bind_tol)
            assert record.m == pytest.approx(pair.m, abs=prior_tol + 0.5 * bind_tol)
        # The choice is the rule applied by hand to the pairwise margins.
        hand = by_hand([(p.m_prior, p.m_bind) for p in pairs], 0.5, -1.5)  # type: ignore[misc]
        assert d.winner == hand
        assert hand is not None and hand > 0  # at tau = -1.5 a later candidate wins here
        kept = d.rag_candidates[hand]
        assert (d.answer, d.source, d.reason) == (kept.answer, "rag", "margin_above_tau")
        # The pairwise fields describe the winner.
        assert (d.rag_answer, d.m_prior, d.m_bind, d.m) == (kept.answer, kept.m_prior,
                                                            kept.m_bind, kept.m)
        assert d.rag_likelihoods == kept.likelihoods and not d.rag_generated
    # Both questions, every candidate, in one session call; nothing was generated.
    assert spy.generated == [] and len(spy.scored) == 1
    assert len(spy.scored[0]) == 3 * sum(1 + len(c) for *_, c in MULTI)
    assert {r.continuation for r in spy.scored[0]} == {
        a for _, _, d, c in MULTI for a in (d, *c.values())}


def test_replay_over_the_grid_is_the_rule_by_hand(
    multi: tuple[list[Decision], list[list[Decision]], Spy]
) -> None:
    decisions, pairwise, _ = multi
    # Replay reads only the record, so a record of the first two Zelvora candidates is a
    # real two-candidate decision; its winner changes with lambda (Eiffel has the larger
    # M_prior, Okonkwo the larger M_bind), which the full record's never does.
    first_two = decisions[0].model_copy(update={
        "rag_candidates": decisions[0].rag_candidates[:2], "winner": None})
    cases = [*zip(decisions, pairwise, strict=True), (first_two, pairwise[0][:2])]
    reached: list[set[int | None]] = []
    for d, pairs in cases:
        again = Decision.model_validate_json(d.model_dump_json())
        assert again == d
        margins = [(p.m_prior, p.m_bind) for p in pairs]
        outcomes: set[int | None] = set()
        for kind in KINDS:
            for lam in (0.0, 0.25, 0.5, 1.0, 2.0, 4.0):
                for tau in (-3.0, -1.5, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0):
                    hand = by_hand(margins, lam, tau, kind)  # type: ignore[arg-type]
                    got = replay_winner(again, lambda_bind=lam, tau=tau, kind=kind)
                    assert got == hand, (kind, lam, tau)
                    assert replay(again, lambda_bind=lam, tau=tau, kind=kind) == (
                        "direct" if hand is None else "rag")
                    assert replay_answer(again, lambda_bind=lam, tau=tau, kind=kind) == (
                        d.direct_answer if hand is None else d.rag_candidates[hand].answer)
                    outcomes.add(hand)
        reached.append(outcomes)
    # The grid reaches Direct and, on the two-candidate record, each of its candidates.
    assert all(None in o for o in reached) and {0, 1} <= reached[-1]


# -- settling: ties, duplicates, agreeing and blank candidates ------------------------------

def test_equal_to_direct_candidates_tie_at_zero_and_duplicates_are_scored_once(
    backend: HFBackend
) -> None:
    spy = Spy(backend)
    d = TrustMargin(spy).arbitrate(  # type: ignore[arg-type]
        Q_ZELVORA, ZELVORA, "Marta Okonkwo",
        rag_candidates=["Gustave Eiffel", "marta okonkwo", "Marta Okonkwo.", "Gustave Eiffel"])
    eiffel, lower, cleaned, copy = d.rag_candidates
    # Only Direct and the first Eiffel were scored: 2 answers x 3 views, one call.
    assert len(spy.scored) == 1 and len(spy.scored[0]) == 6
    assert {r.continuation for r in spy.scored[0]} == {"Marta Okonkwo", "Gustave Eiffel"}
    assert copy.likelihoods == eiffel.likelihoods and copy.m == eiffel.m
    assert eiffel.m is not None and eiffel.m < 0  # the evidence names Okonkwo, not Eiffel
    # Candidates equal to Direct enter with the margins of identical answers, unscored.
    for agreeing in (lower, cleaned):
        assert agreeing.agrees_with_direct and agreeing.likelihoods is None
        assert (agreeing.m_prior, agreeing.m_bind, agreeing.m) == (0.0, 0.0, 0.0)
    # Several candidates are each cut to their short form (one Direct form for all).
    assert cleaned.answer == "Marta Okonkwo" and cleaned.raw == "Marta Okonkwo."
    assert any(w.startswith("rag_candidates[2]: scored on its short form") for w in d.warnings)
    assert d.scoring_form == "paper"
    # M = 0 > tau for both agreeing candidates: a tie, so the earlier one wins.
    assert (d.winner, d.source, d.reason, d.answer) == (1, "agree", "margin_above_tau",
                                                        "marta okonkwo")
    assert replay_winner(d, tau=0.0) is None  # 0 is not above 0: Direct
    # Eiffel, below 0, never beats the equal-to-Direct candidates, whatever tau is.
    assert all(replay_winner(d, tau=t) in (1, None) for t in (-5.0, -1.0, -0.01))


@pytest.mark.parametrize(
    ("direct", "candidates", "reason", "winner", "answer"),
    [
        ("Isambard Brunel", ["", "   "], "rag_answer_blank", None, "Isambard Brunel"),
        ("", ["  ", ""], "both_answers_blank", None, ""),
        ("", ["", "Gustave Eiffel", "Marta Okonkwo"], "direct_answer_blank", 1,
         "Gustave Eiffel"),
        ("Marta Okonkwo", ["", "marta okonkwo", "Marta Okonkwo."], "answers_agree", 1,
         "marta okonkwo"),
    ],
)
def test_settled_without_scoring(backend: HFBackend, direct: str, candidates: list[str],
                                 reason: str, winner: int | None, answer: str) -> None:
    spy = Spy(backend)
    d = TrustMargin(spy).arbitrate(Q_ZELVORA, ZELVORA, direct,  # type: ignore[arg-type]
                                   rag_candidates=candidates)
    assert (d.reason, d.winner, d.answer, d.m) == (reason, winner, answer, None)
    assert spy.scored == [] and spy.generated == []
    assert all(c.likelihoods is None and c.m is None for c in d.rag_candidates)
    assert replay_winner(d, tau=100.0) == winner  # settled: no hyper-parameter changes it


def test_blanks_are_not_scored_and_direct_kept_records_the_best_candidate(
    backend: HFBackend
) -> None:
    spy = Spy(backend)
    # tau = 5 is above every margin these candidates reach (about 0.9): Direct is kept.
    d = TrustMargin(spy, TrustMarginConfig(tau=5.0)).arbitrate(  # type: ignore[arg-type]
        Q_ZELVORA, ZELVORA, "Isambard Brunel",
        rag_candidates=["", "Gustave Eiffel", " \t", "Okonkwo"])
    assert len(spy.scored) == 1 and len(spy.scored[0]) == 3 * 3  # Direct + two candidates
    assert [c.m is None for c in d.rag_candidates] == [True, False, True, False]
    assert (d.answer, d.source, d.winner) == ("Isambard Brunel", "direct", None)
    assert d.reason == "margin_at_or_below_tau"
    ms = {j: c.m for j, c in enumerate(d.rag_candidates) if c.m is not None}
    best = max(ms, key=lambda j: ms[j])  # type: ignore[arg-type, return-value]
    # The pairwise fields describe the best-margin candidate when Direct is kept.
    assert (d.rag_answer, d.m) == (d.rag_candidates[best].answer, ms[best])
    assert d.rag_likelihoods == d.rag_candidates[best].likelihoods
    assert replay_winner(d, tau=-100.0) == best and replay_winner(d) is None


@pytest.mark.slow
def test_no_evidence_keeps_direct_and_nothing_is_generated_for_the_rag_side(
    backend: HFBackend
) -> None:
    spy = Spy(backend)
    tm = TrustMargin(spy)  # type: ignore[arg-type]
    d = tm.arbitrate(Q_ZELVORA, [], "Gustave Eiffel", rag_candidates=["", "Marta Okonkwo"])
    assert (d.reason, d.source, d.winner, d.answer) == ("no_evidence", "direct", None,
                                                        "Gustave Eiffel")
    assert d.rag_answer == "Marta Okonkwo"  # the first non-blank candidate is shown
    assert spy.generated == [] and spy.scored == []
    # With evidence, only Direct is generated: the question-only prompt, nothing else.
    scored = tm.arbitrate(Q_ZELVORA, ZELVORA, rag_candidates={"bm25": "Marta Okonkwo"})
    assert scored.direct_generated and not scored.rag_generated
    assert len(spy.generated) == 1 and len(spy.generated[0]) == 1
    assert "Passage" not in spy.generated[0][0]
    assert scored.rag_candidates[0].name == "bm25" and scored.m is not None
    assert scored.timings.generate_rag_s == 0.0 and scored.timings.generate_direct_s > 0


# -- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("candidates", "field", "problem"),
    [
        ([], "rag_candidates", "is empty"),
        ("Marta Okonkwo", "rag_candidates", "must be a list"),
        (7, "rag_candidates", "must be a list"),
        (["ok", "fine", 3], "rag_candidates[2]", "got int"),
        (["ok", None], "rag_candidates[1]", "got None"),
        ([("bm25", "x"), ("bm25", "y")], "rag_candidates[1]", "repeats the name 'bm25'"),
        ([("", "x")], "rag_candidates[0]", "name"),
        ([(3, "x")], "rag_candidates[0]", "name"),
        ([("a", "b", "c")], "rag_candidates[0]", "tuple of 3"),
        ([("bm25", 5)], "rag_candidates[0]", "must be a string"),
        ({"bm25": "x", "ircot": None}, "rag_candidates[1]", "no text"),
        ({"bm25": "x", None: "y"}, "rag_candidates[1]", "name"),
        (["ok", "bad\ud800"], "rag_candidates[1]", "Unicode"),
    ],
)
def test_bad_candidates_name_the_field(tm: TrustMargin, candidates: Any, field: str,
                                       problem: str) -> None:
    with pytest.raises(InvalidInputError) as single:
        tm.arbitrate("q?", ["p"], "a", rag_candidates=candidates)
    assert single.value.field == field and problem in single.value.problem
    assert "Fix:" in str(single.value)
    with pytest.raises(InvalidInputError) as batch:
        tm.arbitrate_batch([{"question": "q?", "passages": ["p"], "rag_candidates": ["x"]},
                            {"question": "q?", "passages": ["p"],
                             "rag_candidates": candidates}])
    assert batch.value.field == f"inputs[1].{field}"


def test_rag_answer_and_candidates_together_are_refused(tm: TrustMargin) -> None:
    with pytest.raises(InvalidInputError) as info:
        tm.arbitrate("q?", ["p"], "a", "b", rag_candidates=["c"])
    assert info.value.field == "rag_candidates" and "rag_answer" in info.value.problem


def test_a_candidate_too_long_for_the_window_is_named(tm: TrustMargin) -> None:
    item = {"question": "q?", "passages": ["p"], "rag_candidates": ["ok", "word " * 5000]}
    with pytest.raises(InvalidInputError) as info:
        tm.prepare(item, where="inputs[2]")
    assert info.value.field == "inputs[2].rag_candidates[1]"


def test_candidate_forms_are_equivalent(tm: TrustMargin) -> None:
    forms = [{"bm25": "Marta Okonkwo", "ircot": "Gustave Eiffel"},
             [("bm25", "Marta Okonkwo"), ["ircot", "Gustave Eiffel"]]]
    prepared = [tm.prepare({"question": Q_ZELVORA, "passages": ZELVORA, "rag_candidates": f})
                for f in forms]
    assert prepared[0].input.rag_candidates == prepared[1].input.rag_candidates == [
        ("bm25", "Marta Okonkwo"), ("ircot", "Gustave Eiffel")]
    bare = tm.prepare({"question": Q_ZELVORA, "passages": ZELVORA,
                       "rag_candidates": ("Marta Okonkwo", "Gustave Eiffel")})
    assert bare.input.rag_candidates == [(None, "Marta Okonkwo"), (None, "Gustave Eiffel")]


# -- records --------------------------------------------------------------------------------

def _record(**fields: Any) -> dict[str, Any]:
    return {"question": "q", "answer": "a", "source": "direct",
            "reason": "margin_at_or_below_tau", "direct_answer": "a", "rag_answer": "b",
            "direct_generated": False, "rag_generated": False, "m_prior": -1.0,
            "m_bind": -0.8, "m": -1.4, "lambda_bind": 0.5, "tau": -1.0, "passages_given": 1,
            "passages_used": 1, "context_tokens": 5, "context_truncated": False,
            "model_id": "m", "prompt_version": "v", **fields}


def test_old_records_load_and_replay_unchanged() -> None:
    old = Decision.model_validate(_record())
    assert old.rag_candidates == [] and old.winner is None
    assert replay(old) == "direct" and replay_winner(old, tau=-1.5) == 0
    assert replay_answer(old, tau=-1.5) == "b" and replay_answer(old) == "a"
    dumped = json.loads(old.model_dump_json())
    # The policy audit fields are left out under the default rule, like the multi-candidate ones.
    assert set(dumped) == set(Decision.model_fields) - {"rag_candidates", "winner", "policy",
                                                        "paper_choice", "paper_winner",
                                                        "scoring_form", "direct_spans",
                                                        "rag_spans"}
    assert Decision.model_validate(dumped) == old
    with pytest.raises(ValueError, match="winner"):
        Decision.model_validate(_record(winner=0))
    with pytest.raises(ValueError, match="no margins"):
        replay(Decision.model_validate(_record(m_prior=None, m_bind=None, m=None)))


# -- the rule on random margins -------------------------------------------------------------

finite = st.floats(min_value=-50, max_value=50, allow_nan=False)
pairs = st.tuples(finite, finite)
lams = st.floats(min_value=0, max_value=5, allow_nan=False)
kinds = st.sampled_from(KINDS)


@settings(max_examples=200, deadline=None)
@given(pair=pairs, lam=lams, tau=finite, kind=kinds)
def test_one_candidate_verdict_is_its_margin(pair: tuple[float, float], lam: float, tau: float,
                                             kind: str) -> None:
    verdict = verdict_of([pair], lam, tau, kind)
    m = {"rule": pair[0] + lam * pair[1], "weighted_bind": lam * pair[1],
         "prior_only": pair[0]}[kind]
    assert verdict.margins is not None and verdict.margins.m == m
    assert (verdict.margins.m_prior, verdict.margins.m_bind) == pair
    assert verdict.choice == ("rag" if m > tau else "direct")
    assert verdict_of([None, pair, None], lam, tau, kind).choice == verdict.choice


@settings(max_examples=200, deadline=None)
@given(margins=st.lists(pairs, min_size=1, max_size=6), lam=lams, tau=finite,
       kind=kinds, place=st.integers(min_value=0, max_value=6), gap=st.floats(0.01, 10),
       bind=finite)
def test_a_candidate_below_all_others_and_tau_changes_nothing(
    margins: list[tuple[float, float]], lam: float, tau: float, kind: str, place: int,
    gap: float, bind: float,
) -> None:
    before = verdict_of(margins, lam, tau, kind)
    ms = [verdict_of([p], lam, tau, kind).margins.m for p in margins]  # type: ignore[union-attr]
    floor = min([*ms, tau]) - gap
    # A new candidate whose M is below every other and below tau.
    new = {"rule": (floor - lam * bind, bind),
           "weighted_bind": (bind, floor / lam if lam else 0.0),
           "prior_only": (floor, bind)}[kind]
    new_m = verdict_of([new], lam, tau, kind).margins.m  # type: ignore[union-attr]
    assume(new_m < min([*ms, tau]))
    place = min(place, len(margins))
    after = verdict_of([*margins[:place], new, *margins[place:]], lam, tau, kind)
    assert (after.choice, after.reason, after.margins) == (
        before.choice, before.reason, before.margins)
    assert before.candidate is not None
    assert after.candidate == before.candidate + (before.candidate >= place)


@settings(max_examples=200, deadline=None)
@given(margins=st.lists(pairs, min_size=1, max_size=6), lam=lams, tau=finite,
       kind=kinds)
def test_the_verdict_is_the_rule_by_hand(margins: list[tuple[float, float]], lam: float,
                                         tau: float, kind: str) -> None:
    verdict = verdict_of(margins, lam, tau, kind)
    hand = by_hand(margins, lam, tau, kind)
    assert (verdict.candidate if verdict.choice == "rag" else None) == hand
    assert verdict.reason == ("margin_above_tau" if hand is not None
                              else "margin_at_or_below_tau")


views = st.builds(lambda q, r, c: ViewLikelihoods(question_only=q, question_context=r,
                                                  context_only=c, num_tokens=1),
                  finite, finite, finite)


@settings(max_examples=200, deadline=None)
@given(direct=views, candidates=st.lists(views, min_size=2, max_size=5), lam=lams)
def test_largest_margin_beats_every_other_candidate_pairwise(
    direct: ViewLikelihoods, candidates: list[ViewLikelihoods], lam: float
) -> None:
    margins = [compute_margins(direct, c, lam) for c in candidates]
    # The verdict names the best-margin candidate whatever tau (a policy's tau is finite).
    best = verdict_of([(m.m_prior, m.m_bind) for m in margins], lam, 0.0).candidate
    assert best is not None
    for j, other in enumerate(candidates):
        # M_best - M_j is the margin of best over j computed directly: Direct cancels.
        direct_margin = compute_margins(other, candidates[best], lam).m
        assert margins[best].m - margins[j].m == pytest.approx(direct_margin, abs=1e-9)
        assert direct_margin >= -1e-9


def test_ties_keep_the_earlier_candidate_and_nan_does_not_block() -> None:
    assert verdict_of([(1.0, 0.0), (1.0, 0.0)], 0.5, 0.0).candidate == 0
    assert verdict_of([None, (0.0, 2.0), (1.0, 0.0)], 0.5, 0.0).candidate == 1
    nan = verdict_of([(math.nan, 0.0), (1.0, 0.0)], 0.5, 0.0)
    assert (nan.choice, nan.candidate) == ("rag", 1)
    assert verdict_of([(math.nan, 0.0)], 0.5, 0.0).choice == "direct"
    with pytest.raises(ValueError, match="no candidate"):
        verdict_of([None, None], 0.5, 0.0)
