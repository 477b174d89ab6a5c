"""The arbiter's decision flow on scripted likelihoods: the margins and the kept side follow
from the six given numbers (worked out by hand in each test), settled questions score
nothing, and a policy's fixed side generates only that side."""

from __future__ import annotations

import pytest
from scripting import DIRECT, PASSAGE, QUESTION, RAG, Views, arbiter, margins, six

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.testing import ScriptedBackend

# RAG's answer is less expected closed-book but far better bound to the passage.
D = Views(question_only=-1.0, question_context=-3.0, context_only=-2.5)
R = Views(question_only=-2.0, question_context=-0.5, context_only=-1.5)


def test_generated_answers_are_kept_by_the_hand_computed_margin() -> None:
    tm, backend = arbiter(D, R)
    decision = tm.arbitrate(QUESTION, [PASSAGE])
    # M_prior = -2 - (-1) = -1; M_bind = (-0.5 + 1.5) - (-3 + 2.5) = 1.5; M = -1 + 0.75
    assert margins(D, R) == (-1.0, 1.5, -0.25)
    assert (decision.m_prior, decision.m_bind, decision.m) == (-1.0, 1.5, -0.25)
    assert (decision.answer, decision.source, decision.reason) == (RAG, "rag",
                                                                   "margin_above_tau")
    assert decision.direct_generated and decision.rag_generated
    assert decision.model_id == "scripted"
    assert decision.direct_likelihoods is not None
    assert decision.direct_likelihoods.question_context == -3.0
    # Six requests: Direct then RAG, each under the three views.
    assert [(p.view, text) for p, text in backend.scored] == [
        (view, text) for text in (DIRECT, RAG)
        for view in ("question_only", "question_context", "context_only")]


def test_a_higher_threshold_keeps_direct_on_the_same_numbers() -> None:
    tm, _ = arbiter(D, R, tau=0.0)
    decision = tm.arbitrate(QUESTION, [PASSAGE])
    assert (decision.answer, decision.source, decision.reason) == (
        DIRECT, "direct", "margin_at_or_below_tau")
    assert decision.m == -0.25 and decision.tau == 0.0


def test_a_margin_equal_to_tau_keeps_direct() -> None:
    # M_prior = -1, M_bind = -1: M = -1 - 0.5 = -1.5, the paper's tau exactly.
    rag = Views(question_only=-2.0, question_context=-3.0, context_only=-1.5)
    tm, _ = arbiter(D, rag)
    decision = tm.arbitrate(QUESTION, [PASSAGE])
    assert decision.m == -1.5
    assert decision.source == "direct"


def test_lambda_bind_weighs_the_binding_margin() -> None:
    tm, _ = arbiter(D, R, lambda_bind=0.0, tau=-0.5)
    decision = tm.arbitrate(QUESTION, [PASSAGE])
    assert (decision.m, decision.source) == (-1.0, "direct")  # M = M_prior alone


def test_score_once_then_decide_under_several_policies() -> None:
    tm, backend = arbiter(D, R)
    [evidence] = tm.score_batch([{"question": QUESTION, "passages": [PASSAGE]}])
    assert len(backend.scored) == 6
    kept = {name: tm.decide(evidence, policy).source for name, policy in {
        "paper": Policy.paper(), "prior": Policy.prior_only(-0.5),
        "bind": Policy.bind_only(1.0), "direct": Policy.always_direct()}.items()}
    assert kept == {"paper": "rag", "prior": "direct", "bind": "rag", "direct": "direct"}
    assert len(backend.scored) == 6  # deciding ran no model


def test_agreeing_answers_are_settled_without_scoring() -> None:
    backend = six(D, R, rag_text=DIRECT + ".")
    decision = TrustMargin(backend).arbitrate(QUESTION, [PASSAGE])
    assert (decision.source, decision.reason, decision.m) == ("agree", "answers_agree", None)
    assert backend.scored == []


def test_no_passage_keeps_direct_and_generates_only_direct() -> None:
    tm, backend = arbiter(D, R)
    decision = tm.arbitrate(QUESTION, [])
    assert (decision.answer, decision.reason, decision.passages_used) == (
        DIRECT, "no_evidence", 0)
    assert [p.view for p, _ in backend.generated] == ["question_only"]
    assert backend.scored == []


def test_a_blank_rag_answer_keeps_direct() -> None:
    backend = six(D, R, rag_text="   ")
    decision = TrustMargin(backend).arbitrate(QUESTION, [PASSAGE])
    assert (decision.answer, decision.reason) == (DIRECT, "rag_answer_blank")


@pytest.mark.parametrize(("policy", "views", "answer"), [
    (Policy.always_direct(), ["question_only"], DIRECT),
    (Policy.always_rag(), ["question_context"], RAG),
])
def test_a_fixed_side_policy_generates_that_side_and_scores_nothing(
        policy: Policy, views: list[str], answer: str) -> None:
    tm, backend = arbiter(D, R)
    decision = tm.arbitrate(QUESTION, [PASSAGE], policy=policy)
    assert decision.answer == answer
    assert decision.m is None and decision.policy == policy.name
    assert [p.view for p, _ in backend.generated] == views
    assert backend.scored == []
    assert any("margins not computed" in w for w in decision.warnings)


def test_given_answers_are_returned_whole_and_compared_where_they_differ() -> None:
    backend = six(D, R)
    decision = TrustMargin(backend).arbitrate(
        QUESTION, [PASSAGE], direct_answer=f"It was {DIRECT}.", rag_answer=f"It was {RAG}.")
    assert decision.answer == f"It was {RAG}."
    assert (decision.direct_answer, decision.rag_answer) == (DIRECT, RAG)
    assert (decision.m_prior, decision.m_bind) == (-1.0, 1.5)
    assert not decision.direct_generated and backend.generated == []
    # Each differing part is scored alone and after its clause's words (a script that scores
    # by view and words gives both the same mean, so the margins are the script's).
    assert {p.prefix for p, _ in backend.scored} == {"", "It was"}


def test_several_rag_candidates_keep_the_largest_margin() -> None:
    logprobs = {("question_only", DIRECT): -1.0, ("question_context", DIRECT): -3.0,
                ("context_only", DIRECT): -2.5}
    # Candidate M (lambda 0.5): weak -3 + 0.5 * 0 = -3; strong -1 + 0.5 * 1.5 = -0.25.
    for text, views in (("Weak", (-4.0, -3.0, -2.5)), ("Strong", (-2.0, -0.5, -1.5))):
        for view, value in zip(("question_only", "question_context", "context_only"), views,
                               strict=True):
            logprobs[(view, text)] = value
    tm = TrustMargin(ScriptedBackend(logprobs=logprobs))
    decision = tm.arbitrate(QUESTION, [PASSAGE], direct_answer=DIRECT,
                            rag_candidates={"bm25": "Weak", "ircot": "Strong"})
    assert (decision.answer, decision.winner) == ("Strong", 1)
    assert [c.m for c in decision.rag_candidates] == [-3.0, -0.25]
    assert [c.name for c in decision.rag_candidates] == ["bm25", "ircot"]


def test_a_batch_keeps_its_order_and_its_policies() -> None:
    tm, _ = arbiter(D, R)
    items = [{"question": QUESTION, "passages": [PASSAGE], "id": "a"},
             {"question": QUESTION, "passages": [], "id": "b"},
             {"question": QUESTION, "passages": [PASSAGE], "id": "c"}]
    decisions = tm.arbitrate_batch(items, policy=[None, None, Policy.fitted(0.5, 0.0)])
    assert [(d.id, d.source, d.reason) for d in decisions] == [
        ("a", "rag", "margin_above_tau"), ("b", "direct", "no_evidence"),
        ("c", "direct", "margin_at_or_below_tau")]


def test_prompts_are_attached_when_asked() -> None:
    backend = six(D, R, chat_template="<u>{message}</u>")
    decision = TrustMargin(backend).arbitrate(QUESTION, [PASSAGE], include_prompts=True)
    assert decision.prompts is not None
    assert decision.prompts.question_only.startswith("<u>You are a helpful AI assistant.")
    assert f"Passage 0: {PASSAGE}" in decision.prompts.context_only


def test_the_window_caps_the_context_budget() -> None:
    backend = six(D, R, context_window=120)
    passages = [PASSAGE] * 10  # 14 tokens each in the scripted tokenizer
    decision = TrustMargin(backend).arbitrate(QUESTION, passages)
    assert 0 < decision.passages_used < 10
    assert decision.context_tokens <= 120
    assert any("capped" in w for w in decision.warnings)


def test_a_question_that_cannot_fit_the_window_is_refused() -> None:
    backend = six(D, R, context_window=40)
    with pytest.raises(InvalidInputError) as err:
        TrustMargin(backend).arbitrate(QUESTION, [PASSAGE])
    assert err.value.field == "question"
    assert "40-token window" in err.value.problem
    assert backend.generated == []
