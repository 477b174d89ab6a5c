"""The records (``schema``) are only records: the rule that decides and replays them lives in
the rule package (``rule.replay``), the whole text of a given candidate is read by one
record-level rule (``schema.given_text``), and a record keeps the policy name it was decided
by even where the rule no longer knows it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trustmargin_integrations import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.diagnostics import score_decision
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import kept_rag, replay, replay_answer, replay_winner
from trustmargin_integrations.schema import Decision

PASSAGES = ["The Eiffel Tower in Paris was designed by the engineer Gustave Eiffel's firm; "
            "its architect was Stephen Sauvestre."]
QUESTION = "Who was the architect of the Eiffel Tower?"
# Chat texts: what is compared is a part of each, so the record keeps the whole text as raw.
DIRECT_CHAT = "Sure! The architect of the Eiffel Tower was Gustave Eiffel himself."
RAG_CHAT = "According to the passage, the architect of the Eiffel Tower was Stephen Sauvestre."


@pytest.fixture(scope="module")
def given(tm: TrustMargin) -> Decision:
    """A real decision between two given chat answers (the embedded model scores them)."""
    return tm.arbitrate(QUESTION, PASSAGES, direct_answer=DIRECT_CHAT, rag_answer=RAG_CHAT)


def test_a_decision_carries_no_rule_and_the_rule_package_replays_it(given: Decision) -> None:
    assert not [name for name in ("replay", "replay_winner", "replay_policy", "replay_answer",
                                  "chose_rag") if hasattr(given, name)]
    side = replay(given)
    assert side == ("direct" if given.source == "direct" else "rag")
    assert kept_rag(given) is (side == "rag")
    assert replay_winner(given) == (None if side == "direct" else 0)
    assert replay_answer(given) == (given.direct_answer if side == "direct"
                                    else given.rag_answer)
    # A scored question: a threshold beyond any margin keeps Direct, always-RAG keeps RAG.
    assert given.reason in ("margin_above_tau", "margin_at_or_below_tau")
    assert replay(given, tau=100.0) == "direct"
    assert replay(given, Policy.always_rag()) == "rag"


def test_the_returned_and_the_graded_text_are_one_record_level_rule(given: Decision) -> None:
    # What was compared is a part of each chat text; the decision returns the whole text of
    # the kept side as given, and grading a chain's answers reads that same text.
    assert given.direct_raw is not None and given.rag_raw is not None
    side = replay(given)
    assert given.answer == given.given_text(side) == (DIRECT_CHAT if side == "direct"
                                                      else RAG_CHAT)
    graded = score_decision(given, [RAG_CHAT], whole_texts=True)
    assert graded.f1_rag == 1.0 and graded.f1_direct < 1.0
    assert score_decision(given, [RAG_CHAT]).f1_rag < 1.0  # the compared part alone


def test_every_decision_lists_its_candidates_without_storing_the_list(
        tm: TrustMargin, given: Decision) -> None:
    pairwise = given.candidates
    assert len(pairwise) == 1
    one = pairwise[0]
    assert (one.answer, one.raw, one.likelihoods, one.m_prior, one.m_bind, one.m) == (
        given.rag_answer, given.rag_raw, given.rag_likelihoods, given.m_prior, given.m_bind,
        given.m)
    listed = tm.arbitrate(QUESTION, PASSAGES, direct_answer=DIRECT_CHAT,
                          rag_candidates={"chat": RAG_CHAT, "short": "Stephen Sauvestre"})
    assert listed.candidates == listed.rag_candidates and len(listed.candidates) == 2
    # A view: the stored JSON holds the fields it always held, and replay reads the view.
    for d in (given, listed):
        assert "candidates" not in d.model_dump()
        kept = replay_winner(d)
        assert replay_answer(d) == (d.direct_answer if kept is None
                                    else d.candidates[kept].answer)


def test_a_record_keeps_a_policy_name_the_rule_no_longer_knows(given: Decision) -> None:
    # An audit record stays readable after a policy is renamed; replaying it is refused,
    # naming the policy and the names that exist.
    stored = {**given.model_dump(), "policy": "retired_policy"}
    old = Decision.model_validate(stored)
    assert old.policy == "retired_policy"
    assert Decision.model_validate_json(old.model_dump_json()) == old
    with pytest.raises(InvalidInputError) as err:
        replay(old)
    assert err.value.field == "policy.kind" and "rule" in err.value.fix
    # Its margins still replay under any policy the rule knows.
    assert replay(old, Policy.paper()) == replay(given, Policy.paper())
    with pytest.raises(ValidationError, match="pattern"):
        Decision.model_validate({**stored, "policy": "Bind Only"})


def test_a_policy_and_the_rules_numbers_are_not_given_together(given: Decision) -> None:
    with pytest.raises(InvalidInputError) as err:
        replay(given, Policy.paper(), tau=0.0)
    assert err.value.field == "policy"
