"""Issue 17's policies in the product: the config and policy file name a policy, the
arbiter applies it through ``margins.apply_policy``, and the Decision keeps the audit (the
margins and the paper rule's choice) and replays what was actually decided.

Every decision here is made by the real embedded SmolLM2 (tests/conftest.py) on given
answers, so only the six likelihoods are computed; the LangChain router and LlamaIndex
engine tests use real LangChain / LlamaIndex objects around a calibrated TrustMargin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document
from llama_index.core.query_engine import RetrieverQueryEngine

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.llama_index import (
    METADATA_KEY,
    LocalLlamaIndexLLM,
    PassageRetriever,
    TrustMarginQueryEngine,
)
from trustmargin_integrations.policy_file import PolicyFile, shipped_models, shipped_path
from trustmargin_integrations.retrieval import BM25Index
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import kept_rag, replay, replay_answer
from trustmargin_integrations.schema import Decision, Passage

# The passage does not support the RAG answer, so the paper's rule keeps the closed-book
# answer (asserted below): a policy that returns RAG here is visibly the policy's doing.
QUESTION = "What is the capital of France?"
PASSAGES = ["The Zorblat river flows through Quenby."]
DIRECT, RAG = "Paris", "Quenby"


def _with_policy(tm: TrustMargin, policy: str, **numbers: float) -> TrustMargin:
    return TrustMargin(tm.backend, TrustMarginConfig(policy=policy, **numbers))  # type: ignore[arg-type]


def _calibration(policy: Policy) -> PolicyFile:
    """The shipped SmolLM2 file with a policy, as `trustmargin check` writes one."""
    shipped = PolicyFile.load(shipped_path("smollm2-135m"))
    return PolicyFile.model_validate({**shipped.model_dump(), "policy": policy})


@pytest.fixture(scope="module")
def paper(tm: TrustMargin) -> Decision:
    decision = tm.arbitrate(QUESTION, PASSAGES, DIRECT, RAG)
    assert decision.reason == "margin_at_or_below_tau" and decision.answer == DIRECT
    return decision


def _scored(tm: TrustMargin, policy: str) -> Decision:
    """The decision of the fixture's question under ``policy`` from scored evidence
    (score_batch, then decide): a single source arbitrated directly scores nothing."""
    arbiter = _with_policy(tm, policy)
    return arbiter.decide(arbiter.score_batch([{"question": QUESTION, "passages": PASSAGES,
                                                "direct_answer": DIRECT,
                                                "rag_answer": RAG}])[0])


def test_a_fallback_policy_scores_nothing_and_from_evidence_keeps_the_audit(
        tm: TrustMargin, paper: Decision) -> None:
    for policy, answer in (("always_rag", RAG), ("always_direct", DIRECT)):
        unscored = _with_policy(tm, policy).arbitrate(QUESTION, PASSAGES, DIRECT, RAG)
        assert (unscored.answer, unscored.reason) == (answer, f"policy_{policy}")
        assert unscored.m is None and unscored.paper_choice is None
        assert "paper_choice" not in json.loads(unscored.model_dump_json())
        d = _scored(tm, policy)
        assert (d.answer, d.reason, d.policy) == (answer, f"policy_{policy}", policy)
        assert d.paper_choice == "direct"  # what the paper's rule keeps (the fixture)
        for field in ("m_prior", "m_bind", "m"):
            assert getattr(d, field) == pytest.approx(getattr(paper, field), abs=1e-4)
        assert d.direct_likelihoods is not None and d.rag_likelihoods is not None
        # The audit fields travel in the JSON of a non-default policy.
        assert json.loads(d.model_dump_json())["paper_choice"] == "direct"
    # Under the default rule nothing new is written: old decisions and caches are unchanged.
    assert not {"policy", "paper_choice", "paper_winner"} & set(json.loads(
        paper.model_dump_json()))


def test_one_margin_policies_decide_by_their_margin_alone(
        tm: TrustMargin, paper: Decision) -> None:
    assert paper.m_bind is not None and paper.m_prior is not None
    # A threshold just below each margin keeps RAG, just above keeps Direct.
    for policy, margin in (("bind_only", paper.m_bind), ("prior_only", paper.m_prior)):
        for tau, kept in ((margin - 0.01, RAG), (margin + 0.01, DIRECT)):
            d = _with_policy(tm, policy, tau=tau).arbitrate(QUESTION, PASSAGES, DIRECT, RAG)
            assert (d.answer, d.policy, d.paper_choice) == (kept, policy, "direct")
            assert d.reason == ("margin_above_tau" if kept == RAG else "margin_at_or_below_tau")
            assert d.m == pytest.approx(paper.m, abs=1e-4)  # M at lambda_bind, for the audit


def test_replay_reproduces_the_decision_made_and_replays_the_rule_with_arguments(
        tm: TrustMargin, paper: Decision) -> None:
    rag = _scored(tm, "always_rag")
    assert replay(rag) == "rag" and kept_rag(rag) and replay_answer(rag) == RAG
    # With arguments: the margin rule, as the calibration grid and the ablations need.
    assert replay(rag, lambda_bind=0.5, tau=-1.5) == replay(paper) == "direct"
    assert replay(rag, tau=-100.0) == "rag"
    assert replay(rag, kind="prior_only") == replay(paper, kind="prior_only")
    assert paper.m_bind is not None
    bind = _with_policy(tm, "bind_only", tau=paper.m_bind - 0.01).arbitrate(
        QUESTION, PASSAGES, DIRECT, RAG)
    assert replay(bind) == "rag" and replay(bind, lambda_bind=0.5, tau=-1.5) == "direct"
    # A stored decision replays the same after a JSON round trip.
    again = Decision.model_validate_json(bind.model_dump_json())
    assert replay(again) == "rag" and again.policy == "bind_only"


def test_a_settled_question_keeps_its_outcome_under_every_policy(tm: TrustMargin) -> None:
    for policy in ("always_rag", "always_direct", "bind_only"):
        arbiter = _with_policy(tm, policy)
        agree = arbiter.arbitrate(QUESTION, ["Paris is the capital of France."], "Paris",
                                  "Paris.")
        if policy == "bind_only":
            assert (agree.reason, agree.answer, agree.paper_choice) == (
                "answers_agree", "Paris.", "rag")
        else:  # a single source compares nothing: it keeps its side's text
            assert (agree.reason, agree.answer) == (
                f"policy_{policy}", "Paris." if policy == "always_rag" else "Paris")
        blank = arbiter.arbitrate(QUESTION, PASSAGES, DIRECT, "")
        assert (blank.reason, blank.answer, replay(blank)) == ("rag_answer_blank", DIRECT,
                                                                "direct")
        missing = arbiter.arbitrate(QUESTION, [], DIRECT, RAG)
        assert (missing.reason, missing.answer) == ("no_evidence", DIRECT)


def test_old_calibration_files_are_refused_naming_the_field(tmp_path: Path) -> None:
    assert shipped_models() == ["qwen2.5-1.5b", "smollm2-135m"]
    # Files shipped before 0.1.0's policy files held the rule's fitted numbers beside an
    # always-RAG policy that never read them; a policy file holds only what its policy uses.
    old = json.loads(shipped_path("smollm2-135m").read_text(encoding="utf-8"))
    old |= {"lambda_bind": 0.4, "tau": -2.45,
            "policy": {"kind": "always_rag", "lambda_bind": None, "tau": None}}
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not a field of a policy file") as err:
        PolicyFile.load(tmp_path / "old.json")
    assert err.value.field == "calibration.lambda_bind"
    # A file without a policy is no policy file either.
    del old["lambda_bind"], old["tau"], old["policy"]
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="policy: field required") as err:
        PolicyFile.load(tmp_path / "old.json")
    assert err.value.field == "calibration"


@pytest.mark.parametrize("model", ["qwen2.5-1.5b", "smollm2-135m"])
def test_each_shipped_file_is_the_domain_checks_verdict(model: str) -> None:
    """Written by ``trustmargin check RUN --holdout 0.5`` over HotpotQA + CWQ + 2Wiki: it
    carries the chosen policy, the check's evidence and its held-out scores."""
    c = PolicyFile.load(shipped_path(model))
    assert c.model_id == model
    assert c.policy == Policy.always_rag() and c.evidence is not None
    assert c.evidence["verdict"].startswith("Use RAG")
    assert c.held_out is not None and set(c.held_out.sizes) == {"hotpotqa", "cwq", "2wiki"}
    assert c.held_out.methods["calibrated"].mean == c.held_out.methods["rag"].mean
    assert len(set(c.fitted_on.question_ids)) == c.fitted_on.n == sum(c.held_out.sizes.values())
    assert c.apply(TrustMarginConfig(top_k=4)).policy == "always_rag"


def test_a_policy_round_trips_through_the_file_and_sets_the_config(tmp_path: Path) -> None:
    # A number the policy does not take stays the config's (the paper's by default).
    for policy, expected in ((Policy.always_rag(), ("always_rag", 0.5, -1.5)),
                             (Policy.bind_only(-3.0), ("bind_only", 0.5, -3.0)),
                             (Policy.paper(), ("rule", 0.5, -1.5))):
        written = _calibration(policy)
        path = written.save(tmp_path / f"{policy.kind}.json")
        loaded = PolicyFile.load(path)
        assert loaded == written and loaded.decision_policy == policy
        config = loaded.apply()
        assert (config.policy, config.lambda_bind, config.tau) == expected
        assert Policy.from_setting(config.policy, config.lambda_bind, config.tau) == policy
    broken = json.loads((tmp_path / "bind_only.json").read_text())
    broken["policy"] = {"kind": "bind_only", "lambda_bind": 0.5, "tau": -3.0}
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(InvalidInputError, match="policy 'bind_only' takes no lambda_bind"
                       ) as err:
        PolicyFile.load(tmp_path / "broken.json")
    assert err.value.field == "calibration.policy.lambda_bind"


def test_the_langchain_router_applies_a_calibrated_always_rag(
        tm: TrustMargin, paper: Decision) -> None:
    calibrated = TrustMargin.calibrated(tm.backend, _calibration(Policy.always_rag()))
    router = TrustMarginRouter(tm=calibrated)
    d = router.invoke({"question": QUESTION, "direct_answer": DIRECT, "rag_answer": RAG,
                       "documents": [Document(page_content=PASSAGES[0])]})
    assert (d.answer, d.reason, d.paper_choice) == (RAG, "policy_always_rag", None)
    assert d.m_prior is None and d.m_bind is None  # nothing scored under a single source
    # Under the rule per call it scores, and the margins are the fixture's.
    d = router.invoke({"question": QUESTION, "direct_answer": DIRECT, "rag_answer": RAG,
                       "documents": [Document(page_content=PASSAGES[0])]},
                      config={"configurable": {"policy": "rule", "tau": -1.5,
                                               "lambda_bind": 0.5}})
    assert d.m_prior == pytest.approx(paper.m_prior, abs=1e-4)
    assert d.m_bind == pytest.approx(paper.m_bind, abs=1e-4)


def test_the_llama_index_engine_applies_a_calibrated_always_rag(tm: TrustMargin) -> None:
    calibrated = TrustMargin.calibrated(
        tm.backend, _calibration(Policy.always_rag()), TrustMarginConfig(max_new_tokens=8))
    retriever = PassageRetriever(BM25Index.build([Passage(id="q", text=PASSAGES[0])]),
                                 similarity_top_k=1)
    llm = LocalLlamaIndexLLM.from_trustmargin(calibrated)
    engine = TrustMarginQueryEngine(RetrieverQueryEngine.from_args(retriever, llm=llm),
                                    calibrated, llm=llm)
    response = engine.query("Which river flows through Quenby?")
    # A policy that keeps RAG whatever the margins costs nothing: the inner engine answers
    # alone, as it would without the wrapper, and no decision is made or attached.
    plain = RetrieverQueryEngine.from_args(retriever, llm=llm).query(
        "Which river flows through Quenby?")
    assert response.response == plain.response
    assert METADATA_KEY not in (response.metadata or {})
