"""A per-call ``tau`` or ``lambda_bind`` the arbiter's policy never consults is an error, not a
silent no-op: under an always-Direct policy (what ``trustmargin check`` may choose) a router
call with ``configurable={"tau": -50}`` returned the Direct answer while its Decision
recorded ``tau=-50`` as if the threshold had decided. Values the policy uses still apply.

The arbiter is the real embedded model; the refusals come before any model work.
"""

from __future__ import annotations

import pytest

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain import TrustMarginRouter

CALL = {"question": "Who designed the Zelvora Bridge?", "direct_answer": "Gustave Eiffel",
        "rag_answer": "Marta Okonkwo",
        "context": ["The Zelvora Bridge was designed by Marta Okonkwo."]}


def _arbiter(tm: TrustMargin, policy: str) -> TrustMargin:
    return TrustMargin(tm.backend, TrustMarginConfig(policy=policy, tau=-1.0))  # type: ignore[arg-type]


def test_a_value_the_policy_ignores_is_refused_one_it_uses_applies(tm: TrustMargin) -> None:
    direct = TrustMarginRouter(tm=_arbiter(tm, "always_direct"))
    with pytest.raises(InvalidInputError) as err:
        direct.invoke(CALL, config={"configurable": {"tau": -50.0}})
    assert err.value.field == "configurable.tau"
    assert "always-Direct" in err.value.problem and "Fix:" in str(err.value)
    with pytest.raises(InvalidInputError) as err:
        TrustMarginRouter(tm=_arbiter(tm, "always_rag"), lambda_bind=2.0).invoke(CALL)
    assert err.value.field == "lambda_bind"  # the router's own field
    with pytest.raises(InvalidInputError) as err:  # a one-margin rule has no weight
        TrustMarginRouter(tm=_arbiter(tm, "bind_only")).invoke(
            CALL, config={"configurable": {"lambda_bind": 0.1}})
    assert err.value.field == "configurable.lambda_bind"
    # Values the policy uses still apply.
    one_margin = TrustMarginRouter(tm=_arbiter(tm, "bind_only"))
    assert one_margin.call_policy({"configurable": {"tau": -3.0}}).tau == -3.0
    rule = TrustMarginRouter(tm=_arbiter(tm, "rule"))
    tuned = rule.call_policy({"configurable": {"tau": -50.0, "lambda_bind": 0.2}})
    assert (tuned.tau, tuned.lambda_bind) == (-50.0, 0.2)
    # The same value as the arbiter's own is no override at all.
    direct = TrustMarginRouter(tm=_arbiter(tm, "always_direct"))
    assert direct.call_policy({"configurable": {"tau": -1.0}}) == direct.tm.config.decision_policy
