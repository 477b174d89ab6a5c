"""Decisions recorded by the code before the rule package (commit 33b5a91: the real embedded
model on ten demo questions, pairwise and multi-candidate, under five policies) replay
through the rule package's Policy objects exactly as they were decided and replayed then.

The fixture (``data/rule_replay_33b5a91.json``) was written by
``data/make_rule_replay_fixture.py`` run on that commit: each record's Decision JSON, its own
replay, its replays over a lambda x tau x ablation grid and under six policies (made by the
``Decision.replay*`` methods of that time, now the functions of ``rule.replay``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trustmargin_integrations.rule import Policy, Rule
from trustmargin_integrations.rule.replay import (
    own_policy,
    recorded_margins,
    replay,
    replay_answer,
    replay_winner,
)
from trustmargin_integrations.schema import Decision

FIXTURE = Path(__file__).parent / "data" / "rule_replay_33b5a91.json"


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_the_fixture_covers_every_kind_of_decision(recorded: dict[str, Any]) -> None:
    reasons = {json.loads(r["json"])["reason"] for r in recorded["records"]}
    assert {"margin_above_tau", "margin_at_or_below_tau", "no_evidence", "policy_always_rag",
            "policy_always_direct"} <= reasons
    assert any(json.loads(r["json"]).get("rag_candidates") for r in recorded["records"])


def test_recorded_decisions_load_and_dump_byte_identically(recorded: dict[str, Any]) -> None:
    for r in recorded["records"]:
        assert Decision.model_validate_json(r["json"]).model_dump_json() == r["json"]


def test_own_policy_reproduces_choice_reason_and_margins_to_the_bit(
        recorded: dict[str, Any]) -> None:
    for r in recorded["records"]:
        d = Decision.model_validate_json(r["json"])
        kept = replay_winner(d)
        assert replay(d) == ("direct" if kept is None else "rag") == r["replay"]
        assert kept == (d.winner if d.rag_candidates else (None if d.source == "direct"
                                                             else 0)) or d.source == "agree"
        margins = recorded_margins(d)
        if margins is None:
            continue
        verdict = own_policy(d).verdict(margins)
        assert verdict.reason == d.reason
        shown = d.rag_candidates[verdict.candidate] if d.rag_candidates else d
        assert verdict.candidate is not None and shown.m_prior == d.m_prior
        if isinstance(own_policy(d), Rule):
            assert verdict.margins is not None and verdict.margins.m == d.m  # bit for bit


FIXTURE_NAMES = {"full": "rule", "no_prior": "weighted_bind", "no_bind": "prior_only",
                 "paper": "rule", "fitted": "rule"}
"""The fixture's old policy names and the policy each one is."""


def test_grid_and_policy_replays_equal_the_old_code(recorded: dict[str, Any]) -> None:
    # The fixture names the policies as the old code did (its replay variants, the policy
    # files' "paper"/"fitted"); the package reads only the policies' own names.
    grid = [Policy.of(FIXTURE_NAMES.get(old, old), lam, tau, drop_unused=True)
            for lam, tau, old in recorded["grid"]]
    policies = [Policy.of(FIXTURE_NAMES.get(p["kind"], p["kind"]), p["lambda_bind"], p["tau"])
                for p in recorded["policies"]]
    for r in recorded["records"]:
        d = Decision.model_validate_json(r["json"])
        assert [replay_winner(d, p) for p in grid] == r["replay_grid"]
        assert [replay_winner(d, p) for p in policies] == r["replay_policies"]
        assert [replay_answer(d, lambda_bind=lam, tau=tau, kind=FIXTURE_NAMES[old])
                for lam, tau, old in recorded["grid"]] == r["answers_grid"]
