"""A policy that ignores the margins runs nothing extra at the arbiter: under always-RAG /
always-Direct (``Policy.unscored``) ``arbitrate_batch``, the router and ``trustmargin score``
generate only the kept side, when it is missing, and score nothing; the paper's rule and
``score_batch`` still score.

Real parts: the embedded SmolLM2-135M (session fixture). ``CallSpy`` (tests/spy_support.py)
is the real backend with its model calls recorded (everything runs for real).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.score_support import Loader, score_settings
from tests.spy_support import CallSpy
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import UnscoredDecisionError
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import made_unscored, replay, replay_answer
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.score_file import run_score

QUESTION = "Who designed the Velmora Bridge?"
PASSAGES = ["The Velmora Bridge in Oststadt was designed by the engineer Tomas Rilke."]
DIRECT = "I believe the Velmora Bridge was designed by Gustave Eiffel.\nHe built many bridges."
RAG = "The Velmora Bridge was designed by Tomas Rilke [1].\n\nHe was an engineer in Oststadt."
BOTH = {"question": QUESTION, "passages": PASSAGES, "direct_answer": DIRECT, "rag_answer": RAG}


def spied(backend: HFBackend, policy: str = "rule") -> tuple[TrustMargin, CallSpy]:
    spy = CallSpy(backend)
    return TrustMargin(spy, TrustMarginConfig(policy=policy)), spy  # type: ignore[arg-type]


def _unscored(d: Decision, policy: str) -> None:
    """The record of a question decided without margins."""
    assert d.policy == policy and d.reason == f"policy_{policy}"
    assert (d.m_prior, d.m_bind, d.m) == (None, None, None)
    assert d.direct_likelihoods is None and d.rag_likelihoods is None
    assert any(w.startswith("margins not computed") for w in d.warnings)
    assert d.timings.scoring_s == 0.0


@pytest.mark.parametrize(("policy", "kept"), [("always_rag", RAG), ("always_direct", DIRECT)])
def test_given_answers_under_a_fixed_side_take_no_model_call(backend: HFBackend, policy: str,
                                                             kept: str) -> None:
    tm, spy = spied(backend, policy)
    decisions = tm.arbitrate_batch([BOTH, {**BOTH, "id": "two"}])
    assert spy.calls == 0
    for d in decisions:
        _unscored(d, policy)
        assert d.answer == kept  # the kept side's text, whole
        assert d.source == policy.removeprefix("always_")
    # A per-call fixed policy on a rule arbiter: the same, nothing run.
    tm, spy = spied(backend, "rule")
    d = tm.arbitrate(**BOTH, policy=Policy.of(policy))
    assert spy.calls == 0 and d.answer == kept
    _unscored(d, policy)


def test_a_missing_kept_side_is_the_only_generation_and_settled_outcomes_stay(
        backend: HFBackend) -> None:
    tm, spy = spied(backend, "always_rag")
    d = tm.arbitrate(QUESTION, PASSAGES, direct_answer=DIRECT)
    prepared = tm.prepare({"question": QUESTION, "passages": PASSAGES})
    assert spy.generated == [[prepared.views.question_context]] and spy.scored == []
    _unscored(d, "always_rag")
    assert d.rag_generated and d.answer == d.rag_answer and d.answer.strip()
    # Nothing given: still only the RAG side; Direct is not generated.
    tm, spy = spied(backend, "always_rag")
    d = tm.arbitrate(QUESTION, PASSAGES)
    assert spy.generated == [[prepared.views.question_context]] and spy.scored == []
    assert not d.direct_generated and d.direct_answer == ""
    # Always-Direct: only the closed-book generation.
    tm, spy = spied(backend, "always_direct")
    d = tm.arbitrate(QUESTION, PASSAGES, rag_answer=RAG)
    assert spy.generated == [[prepared.views.question_only]] and spy.scored == []
    _unscored(d, "always_direct")
    assert d.direct_generated and d.answer == d.direct_answer
    # Settled outcomes stay: no passage keeps Direct, and only Direct is generated for it.
    tm, spy = spied(backend, "always_rag")
    d = tm.arbitrate(QUESTION, [], direct_answer=DIRECT, rag_answer=RAG)
    assert (d.reason, d.answer, spy.calls) == ("no_evidence", DIRECT, 0)
    d = tm.arbitrate(QUESTION, [])
    alone = tm.prepare({"question": QUESTION, "passages": []})
    assert d.reason == "no_evidence" and d.direct_generated and not d.rag_generated
    assert spy.generated == [[alone.views.question_only]] and spy.scored == []
    # A blank kept side settles as before: Direct kept, a given one taking no model call.
    tm, spy = spied(backend, "always_rag")
    d = tm.arbitrate(QUESTION, PASSAGES, DIRECT, "")
    assert (d.reason, d.answer, spy.calls) == ("rag_answer_blank", DIRECT, 0)


def test_the_papers_rule_and_score_batch_still_score(backend: HFBackend) -> None:
    tm, spy = spied(backend, "rule")
    d = tm.arbitrate_batch([BOTH])[0]
    assert spy.scored and d.m is not None and d.reason.startswith("margin_")
    scored = len(spy.scored)
    # score_batch scores everything (arbitrating under always-RAG scores nothing); decide
    # under a fixed policy keeps the margins.
    tm, spy = spied(backend, "always_rag")
    tm.arbitrate_batch([BOTH])
    assert spy.calls == 0
    evidence = tm.score_batch([BOTH])
    assert len(spy.scored) == scored
    under_rag = tm.decide(evidence[0])
    assert under_rag.reason == "policy_always_rag" and under_rag.m == pytest.approx(d.m)
    assert not made_unscored(under_rag)
    assert tm.decide(evidence[0], Policy.paper()).source == d.source
    # Several RAG candidates under always-RAG: the margins pick the candidate, so it scores.
    tm, spy = spied(backend, "always_rag")
    tm.arbitrate(QUESTION, PASSAGES, DIRECT, rag_candidates=["Tomas Rilke", "Oststadt"])
    assert spy.scored


def test_the_router_inherits_it(backend: HFBackend) -> None:
    tm, spy = spied(backend, "always_rag")
    call = {"question": QUESTION, "direct_answer": DIRECT, "rag_answer": RAG,
            "context": PASSAGES}
    decision = TrustMarginRouter(tm).invoke(call)
    assert spy.calls == 0 and decision.answer == RAG
    _unscored(decision, "always_rag")
    answer = TrustMarginRouter(tm, output="answer").invoke(
        call, config={"configurable": {"policy": "always_direct"}})
    assert spy.calls == 0 and answer == DIRECT
    # The rule per call still scores.
    TrustMarginRouter(tm).invoke(call, config={"configurable": {"policy": "rule"}})
    assert spy.scored


def test_trustmargin_score_inherits_it(backend: HFBackend, tmp_path: Path) -> None:
    tm, spy = spied(backend, "always_direct")
    source = tmp_path / "pairs.jsonl"
    source.write_text("".join(json.dumps({**BOTH, "id": f"q{i}"}) + "\n" for i in range(3)),
                      encoding="utf-8")
    out = tmp_path / "decisions.jsonl"
    run_score(source, out, score_settings(policy="always_direct"), Loader(tm), batch_size=2,
              progress=False)
    rows = [Decision.model_validate_json(line)
            for line in out.read_text(encoding="utf-8").splitlines()]
    assert spy.calls == 0 and len(rows) == 3
    for row in rows:
        _unscored(row, "always_direct")
        assert row.answer == DIRECT


def test_an_unscored_record_replays_only_to_a_side(backend: HFBackend) -> None:
    tm, _ = spied(backend, "always_rag")
    given = Decision.model_validate_json(tm.arbitrate(**BOTH).model_dump_json())  # reloads
    assert made_unscored(given)
    assert replay(given) == "rag" and replay_answer(given) == given.rag_answer
    assert replay(given, Policy.always_direct()) == "direct"  # both answers recorded
    with pytest.raises(UnscoredDecisionError) as err:
        replay(given, Policy.paper())
    assert err.value.field == "policy" and "without scoring" in err.value.problem
    with pytest.raises(UnscoredDecisionError):
        replay(given, tau=-1.0)
    alone = tm.arbitrate(QUESTION, PASSAGES, rag_answer=RAG)  # Direct never produced
    with pytest.raises(UnscoredDecisionError) as err:
        replay(alone, Policy.always_direct())
    assert "never produced" in err.value.problem
