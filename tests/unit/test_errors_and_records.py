"""Bad input is refused before any model call, naming the field and the fix; a Decision
survives JSON unchanged and replays under other policies without the model."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from scripting import PASSAGE, QUESTION, RAG, Views, arbiter

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import replay, replay_answer
from trustmargin_integrations.schema import Decision

D = Views(question_only=-1.0, question_context=-3.0, context_only=-2.5)
R = Views(question_only=-2.0, question_context=-0.5, context_only=-1.5)


@pytest.mark.parametrize(("kwargs", "field", "fix"), [
    ({"question": "   ", "passages": [PASSAGE]}, "question", "question"),
    ({"question": 42, "passages": [PASSAGE]}, "question", "question"),
    ({"question": QUESTION, "passages": PASSAGE}, "passages", "list"),
    ({"question": QUESTION, "passages": [PASSAGE, 3]}, "passages[1]", ""),
    ({"question": QUESTION, "passages": [PASSAGE], "direct_answer": 7}, "direct_answer", ""),
    ({"question": QUESTION, "passages": [PASSAGE], "rag_answer": "x",
      "rag_candidates": ["y"]}, "rag_candidates", "rag_answer"),
])
def test_arbitrate_names_the_bad_field(kwargs: dict[str, Any], field: str, fix: str) -> None:
    tm, backend = arbiter(D, R)
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate(**kwargs)
    assert err.value.field == field
    assert err.value.fix and fix in err.value.fix
    assert backend.generated == [] and backend.scored == []


def test_a_batch_error_names_the_inputs_place() -> None:
    tm, backend = arbiter(D, R)
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate_batch([{"question": QUESTION, "passages": [PASSAGE]},
                            {"question": "", "passages": [PASSAGE]}])
    assert err.value.field == "inputs[1].question"
    assert backend.generated == []


def test_answer_batch_refuses_a_single_string() -> None:
    tm, _ = arbiter(D, R)
    with pytest.raises(InvalidInputError) as err:
        tm.answer_batch(QUESTION, retriever=None)  # type: ignore[arg-type]
    assert (err.value.field, err.value.problem) == ("questions", "is a single string")


def test_answer_batch_wants_one_given_answer_per_question() -> None:
    tm, _ = arbiter(D, R)
    with pytest.raises(InvalidInputError) as err:
        tm.answer_batch([QUESTION, QUESTION], retriever=None,  # type: ignore[arg-type]
                        direct_answers=["a"])
    assert err.value.field == "direct_answers"
    assert err.value.fix == "give one per question"


@pytest.mark.parametrize(("policy", "field"), [
    ("rule", "policy"), ([Policy.paper()], "policy"), ([None, "rule"], "policy[1]"),
])
def test_a_bad_policy_argument_is_named(policy: Any, field: str) -> None:
    tm, _ = arbiter(D, R)
    items = [{"question": QUESTION, "passages": [PASSAGE]}] * 2
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate_batch(items, policy=policy)
    assert err.value.field == field


@pytest.mark.parametrize(("config", "field"), [
    ({"tau": float("nan")}, "tau"), ({"top_k": 0}, "top_k"), ({"colour": "red"}, "colour"),
    ({"policy": "median"}, "policy"),
])
def test_a_bad_config_is_a_typed_error(config: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        TrustMarginConfig(**config)
    assert err.value.field == field
    assert err.value.fix


def test_a_backend_that_is_not_one_is_refused() -> None:
    with pytest.raises(InvalidInputError) as err:
        TrustMargin("smollm2-135m")  # type: ignore[arg-type]
    assert err.value.field == "backend"
    assert "from_pretrained" in err.value.fix


def test_a_decision_round_trips_through_json() -> None:
    tm, _ = arbiter(D, R)
    decision = tm.arbitrate(QUESTION, [PASSAGE], id="q1", include_prompts=True)
    text = decision.model_dump_json()
    again = Decision.model_validate_json(text)
    assert again == decision
    assert again.model_dump_json() == text
    assert (again.id, again.answer, again.m, again.passages[0].rank) == ("q1", RAG, -0.25, 0)


def test_a_record_with_a_nan_margin_is_refused() -> None:
    tm, _ = arbiter(D, R)
    data = tm.arbitrate(QUESTION, [PASSAGE]).model_dump()
    data["m"] = float("nan")
    with pytest.raises(ValidationError):
        Decision.model_validate(data)


def test_a_recorded_decision_replays_under_other_policies() -> None:
    tm, _ = arbiter(D, R)
    decision = Decision.model_validate_json(
        tm.arbitrate(QUESTION, [PASSAGE]).model_dump_json())
    # M_prior -1, M_bind 1.5: kept by the paper's rule (M -0.25), not at tau 0, kept by
    # M_bind > 1, not by M_prior > -0.5.
    assert replay(decision) == "rag"
    assert replay(decision, tau=0.0) == "direct"
    assert replay(decision, Policy.bind_only(1.0)) == "rag"
    assert replay(decision, Policy.prior_only(-0.5)) == "direct"
    assert replay_answer(decision, tau=0.0) == decision.direct_answer
