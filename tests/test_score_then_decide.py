"""Score, then decide: the policy is an argument of a call, not of the arbiter.

No likelihood depends on tau, lambda_bind or the policy, so a call under another policy
scores with the same arbiter (never rebuilt), questions under different policies share one
model session, and a cached eval run replays under any policy without loading a model. All
with the real embedded model; the model loader is watched, not replaced, until the replay.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.hf import HFBackend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import TrustMarginRouter
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.rule.replay import replay_winner

PASSAGES = ["The Zelvora Bridge was designed by Marta Okonkwo and opened in 1987.",
            "Port Mireaux is the capital of Saint Orrel."]
CALLS = [
    {"question": "Who designed the Zelvora Bridge?", "direct_answer": "Gustave Eiffel",
     "rag_answer": "Marta Okonkwo", "context": PASSAGES[:1]},
    {"question": "What is the capital of Saint Orrel?", "direct_answer": "Saint Orrel City",
     "rag_answer": "Port Mireaux", "context": PASSAGES[1:]},
    {"question": "In what year did the Zelvora Bridge open?", "direct_answer": "1987",
     "rag_answer": "1992", "context": PASSAGES[:1]},
]
INPUTS = [{"question": c["question"], "passages": c["context"],
           "direct_answer": c["direct_answer"], "rag_answer": c["rag_answer"]} for c in CALLS]
POLICIES = [Policy.paper(), Policy.fitted(1.0, 3.0), Policy.bind_only(-2.0),
            Policy.prior_only(0.0), Policy.always_rag(), Policy.always_direct()]


def _sessions(monkeypatch: pytest.MonkeyPatch, tm: TrustMargin) -> list[int]:
    """Count the model sessions ``tm`` opens (each one a scoring pass)."""
    opened: list[int] = []
    session = tm.backend.session

    def counted(*args: Any, **kwargs: Any) -> Any:
        opened.append(1)
        return session(*args, **kwargs)

    monkeypatch.setattr(tm.backend, "session", counted)
    return opened


def _arbiters_built(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the TrustMargin arbiters built from now on."""
    built: list[int] = []
    init = TrustMargin.__init__

    def counted_init(self: TrustMargin, *args: Any, **kwargs: Any) -> None:
        built.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(TrustMargin, "__init__", counted_init)
    return built


def _no_timings(decision: Any) -> dict[str, Any]:
    return decision.model_dump(exclude={"timings"})


def test_a_call_policy_decides_as_a_config_policy_does(tm: TrustMargin) -> None:
    for policy in POLICIES:
        own = TrustMargin(tm.backend, TrustMarginConfig(**policy.setting))
        expected = own.arbitrate_batch(INPUTS)
        got = tm.arbitrate_batch(INPUTS, policy=policy)
        assert [_no_timings(d) for d in got] == [_no_timings(d) for d in expected], policy
    # One policy per input, in the same batch.
    mixed = tm.arbitrate_batch(INPUTS, policy=[POLICIES[1], None, POLICIES[3]])
    assert [d.tau for d in mixed] == [3.0, tm.config.tau, 0.0]
    assert [d.policy for d in mixed] == ["rule", tm.config.policy, "prior_only"]


def test_bad_call_policies_are_typed_errors(tm: TrustMargin) -> None:
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate_batch(INPUTS, policy=[Policy.paper()])
    assert err.value.field == "policy"
    with pytest.raises(InvalidInputError) as err:
        tm.arbitrate_batch(INPUTS[:1], policy="bind_only")  # type: ignore[arg-type]
    assert err.value.field == "policy"
    with pytest.raises(InvalidInputError) as err:  # beyond what a Decision records
        tm.arbitrate_batch(INPUTS[:1], policy=[Policy.fitted(0.5, 500.0)])
    assert err.value.field == "policy[0].tau"


def test_router_calls_under_different_policies_share_one_session(
        tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> None:
    router = TrustMarginRouter(tm)
    configs: list[Any] = [{"configurable": {"tau": 3.0}},
                          {"configurable": {"policy": "always_rag"}},
                          {"configurable": {"tau": -3.0, "lambda_bind": 1.5}}]
    built = _arbiters_built(monkeypatch)
    opened = _sessions(monkeypatch, tm)
    decisions = router.batch(CALLS, configs)
    assert len(opened) == 1 and not built  # one scoring pass, no arbiter rebuilt
    assert [(d.policy, d.tau, d.lambda_bind) for d in decisions] == [
        ("rule", 3.0, 0.5), ("always_rag", -1.5, 0.5), ("rule", -3.0, 1.5)]
    assert decisions[1].source == "rag" and decisions[1].reason == "policy_always_rag"
    for d, cfg in zip(decisions, configs, strict=True):
        assert replay_winner(d, router.call_policy(cfg)) == (None if d.source == "direct"
                                                             else 0)
    single = router.invoke(CALLS[0], {"configurable": {"tau": 3.0}})
    # Alone, not in a padded batch: the same decision, margins equal to fp32 batching noise.
    assert (single.source, single.reason, single.tau) == (
        decisions[0].source, decisions[0].reason, 3.0) and not built
    assert single.m == pytest.approx(decisions[0].m, abs=1e-4)


def test_changing_tau_on_a_cached_eval_run_loads_no_model(
        tm: TrustMargin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trustmargin_integrations.evaluation.datasets import load_dataset
    from trustmargin_integrations.evaluation.diagnostics import score_records
    from trustmargin_integrations.evaluation.policy_selection import PolicyTable
    from trustmargin_integrations.evaluation.rule_fit import Problem
    from trustmargin_integrations.evaluation.rundir import load_run, open_store, record_dataset
    from trustmargin_integrations.evaluation.runner import PrecomputedPassages, run_eval

    rows = [{"test_id": str(i), "question": c["question"], "answer": [c["rag_answer"]],
             "passages": [{"title": "", "text": t} for t in c["context"]]}
            for i, c in enumerate(CALLS)]
    (tmp_path / "three.json").write_text(json.dumps(rows), encoding="utf-8")
    run_dir = tmp_path / "run"
    records = run_eval(tm, load_dataset(str(tmp_path / "three.json")), open_store(run_dir),
                       source=PrecomputedPassages(), top_k=3, batch_size=4, progress=False)
    record_dataset(run_dir, "three", records, {"retrieval": "precomputed", "top_k": 3})

    loads: list[str] = []
    load = HFBackend.load

    def counted_load(*args: Any, **kwargs: Any) -> Any:
        loads.append(str(args[:1]))
        return load(*args, **kwargs)

    monkeypatch.setattr(HFBackend, "load", staticmethod(counted_load))
    sessions = _sessions(monkeypatch, tm)
    cached = [r.decision for r in load_run(run_dir)[0].records]
    scored = score_records(load_run(run_dir)[0].records)
    table = PolicyTable({"three": scored})
    problem = Problem({"three": scored})
    for policy in POLICIES:
        replayed = [replay_winner(d, policy) for d in cached]
        assert list(table.chooses_rag(policy, range(len(cached)))) == [
            w is not None for w in replayed]
    for tau in (-3.0, 3.0):
        for d, grid in zip(cached, problem.rag, strict=True):
            j = problem.taus.index(tau)
            assert grid[problem.lambdas.index(0.5), j] == (
                replay_winner(d, Policy.fitted(0.5, tau)) is not None)
    assert not loads and not sessions  # no model loaded, no scoring pass

    # ... and the replay is what the arbiter decides when asked under that policy (greedy
    # generation: the same candidates, the same likelihoods).
    inputs = [{"question": c["question"], "passages": c["context"]} for c in CALLS]
    for policy in (Policy.fitted(0.5, 3.0), Policy.fitted(0.5, -3.0)):
        fresh = tm.arbitrate_batch(inputs, policy=policy)
        assert [replay_winner(d, policy) for d in cached] == [
            None if f.source == "direct" else 0 for f in fresh]


def test_llama_index_arbiters_with_different_policies_share_one_tm(
        tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from trustmargin_integrations.llama_index import TrustMarginArbiter

    nodes = [NodeWithScore(node=TextNode(text=PASSAGES[0]), score=1.0)]
    call = CALLS[0]
    built = _arbiters_built(monkeypatch)
    direct = TrustMarginArbiter(tm, policy=Policy.always_direct())
    kept = direct.arbitrate(call["question"], call["direct_answer"], call["rag_answer"],
                            source_nodes=nodes).metadata["trustmargin"]
    assert (kept.policy, kept.source, kept.reason) == ("always_direct", "direct",
                                                       "policy_always_direct")
    rag = direct.arbitrate(call["question"], call["direct_answer"], call["rag_answer"],
                           source_nodes=nodes, policy=Policy.always_rag()
                           ).metadata["trustmargin"]
    assert (rag.policy, rag.source) == ("always_rag", "rag") and rag.m == kept.m
    assert not built
    with pytest.raises(InvalidInputError) as err:
        TrustMarginArbiter(tm, policy="always_rag")  # type: ignore[arg-type]
    assert err.value.field == "policy"


def test_scored_evidence_is_decided_under_every_policy_without_the_model(
        tm: TrustMargin, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {policy: tm.arbitrate_batch(INPUTS, policy=policy) for policy in POLICIES}
    opened = _sessions(monkeypatch, tm)
    evidence = tm.score_batch(INPUTS)
    assert len(opened) == 1
    for policy, decisions in expected.items():
        decided = [tm.decide(e, policy) for e in evidence]
        if policy.fixed_side is None:
            assert [_no_timings(d) for d in decided] == [_no_timings(d) for d in decisions]
        else:  # arbitrated under a single source, nothing was scored; the choice is the same
            assert [(d.answer, d.source) for d in decided] == [
                (d.answer, d.source) for d in decisions]
            assert all(d.m is None for d in decisions if d.reason.startswith("policy_"))
    assert [_no_timings(tm.decide(e)) for e in evidence] == [
        _no_timings(d) for d in expected[Policy.paper()]]
    assert len(opened) == 1  # every policy decided on the one scoring pass
