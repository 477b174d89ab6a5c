"""Every number that enters a decision is checked where it enters: the rule's parameters in
the config, the LangChain router, the ``score`` command and replay; likelihoods, margins and
passage scores.

Real records only; the remote backend's log-probabilities are tested against a real local
server in tests/test_fault_server.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from score_support import GOOD, write_jsonl
from typer.testing import CliRunner

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.cli import app
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.rule.replay import replay, replay_answer, replay_winner
from trustmargin_integrations.schema import (
    Decision,
    Passage,
    PassageRef,
    RagCandidate,
    ViewLikelihoods,
)
from trustmargin_integrations.vocabulary import LAMBDA_BIND_LIMIT, TAU_LIMIT

NON_FINITE = [math.nan, math.inf, -math.inf]
runner = CliRunner()


@pytest.mark.parametrize(("name", "value"), [
    ("tau", True), ("tau", "1.5"), ("tau", math.nan), ("tau", math.inf), ("tau", 1e308),
    ("tau", -TAU_LIMIT - 0.5), ("tau", None), ("lambda_bind", -50), ("lambda_bind", False),
    ("lambda_bind", "0.5"), ("lambda_bind", LAMBDA_BIND_LIMIT * 2), ("lambda_bind", -math.inf),
    ("top_k", 0), ("max_new_tokens", 10_000),
])
def test_the_config_refuses_absurd_numbers_with_a_typed_error(name: str, value: Any) -> None:
    with pytest.raises(InvalidInputError) as err:
        TrustMarginConfig(**{name: value})
    assert err.value.field == name and "Fix:" in str(err.value)
    assert not isinstance(err.value, ValidationError)


def test_the_config_keeps_sensible_numbers() -> None:
    config = TrustMarginConfig(tau=5, lambda_bind=0)
    assert (config.tau, config.lambda_bind) == (5.0, 0.0)
    assert TrustMarginConfig(tau=-TAU_LIMIT, lambda_bind=LAMBDA_BIND_LIMIT).tau == -TAU_LIMIT
    updated = TrustMarginConfig.model_validate({**config.model_dump(), "tau": -0.7})
    assert updated.tau == -0.7
    with pytest.raises(InvalidInputError) as err:
        TrustMarginConfig.model_validate({**config.model_dump(), "tau": 1e308})
    assert err.value.field == "tau"


def views(q: float = -1.0, r: float = -0.5, c: float = -2.0) -> dict[str, Any]:
    return {"question_only": q, "question_context": r, "context_only": c, "num_tokens": 2}


def decision(**changes: Any) -> Decision:
    base: dict[str, Any] = dict(
        question="Who designed the tower?", answer="Sauvestre", source="rag",
        reason="margin_above_tau", direct_answer="Eiffel", rag_answer="Sauvestre",
        direct_generated=False, rag_generated=False,
        direct_likelihoods=ViewLikelihoods(**views()),
        rag_likelihoods=ViewLikelihoods(**views(-1.2, -0.1, -2.5)),
        m_prior=-0.2, m_bind=0.9, m=0.25, lambda_bind=0.5, tau=-1.5, passages_given=1,
        passages_used=1, context_tokens=12, context_truncated=False, model_id="m",
        prompt_version="v")
    return Decision(**{**base, **changes})


@pytest.mark.parametrize("value", NON_FINITE)
def test_likelihoods_margins_and_scores_refuse_non_finite_numbers(value: float) -> None:
    for view in ("question_only", "question_context", "context_only"):
        with pytest.raises(ValidationError, match="finite"):
            ViewLikelihoods(**{**views(), view: value})
    for field in ("m_prior", "m_bind", "m", "tau", "lambda_bind"):
        with pytest.raises(ValidationError):
            decision(**{field: value})
    with pytest.raises(ValidationError, match="finite"):
        RagCandidate(answer="x", m=value)
    with pytest.raises(ValidationError, match="finite"):
        Passage(id="1", text="t", score=value)
    with pytest.raises(ValidationError, match="finite"):
        PassageRef(rank=0, score=value)
    # A NaN margin in a stored decision is refused on reading, never shown as null.
    text = decision().model_dump_json().replace('"m":0.25', '"m":NaN')
    with pytest.raises(ValidationError):
        Decision.model_validate_json(text)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tau": math.nan}, "tau"), ({"tau": True}, "tau"), ({"tau": "1.5"}, "tau"),
    ({"tau": 1e308}, "tau"), ({"lambda_bind": math.nan}, "lambda_bind"),
    ({"lambda_bind": -50}, "lambda_bind"), ({"lambda_bind": "1"}, "lambda_bind"),
])
def test_replay_refuses_absurd_parameters(kwargs: dict[str, Any], field: str) -> None:
    scored = decision()
    settled = decision(reason="answers_agree", source="agree", m=None, m_prior=None,
                       m_bind=None, direct_likelihoods=None, rag_likelihoods=None)
    for d in (scored, settled):
        for replayed in (replay, replay_winner, replay_answer):
            with pytest.raises(InvalidInputError) as err:
                replayed(d, **kwargs)
            assert err.value.field == field
    assert replay(scored, tau=0.3) == "direct" and replay(scored, tau=0.2) == "rag"
    assert replay(scored, lambda_bind=0) == "rag"  # M = -0.2 > -1.5


def test_non_finite_rule_parameters_are_refused_by_the_router_and_the_command(
    tm: TrustMargin, tmp_path: Path
) -> None:
    for name in ("tau", "lambda_bind"):
        for value in NON_FINITE:
            with pytest.raises(InvalidInputError, match=name):
                TrustMarginConfig(**{name: value})
            with pytest.raises(InvalidInputError, match=name):
                TrustMarginRouter(tm=tm, **{name: value})
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD])
    for option in ("--tau", "--lambda-bind"):
        result = runner.invoke(app, ["score", "-i", str(src), "-o", str(tmp_path / "o.jsonl"),
                                     option, "nan"])
        assert isinstance(result.exception, InvalidInputError), result.exception
        assert result.exception.field == option
    assert not (tmp_path / "o.jsonl").exists()
