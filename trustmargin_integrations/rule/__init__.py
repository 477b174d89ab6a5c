"""The decision rule of TrustMargin (Section 3 of the paper): pure arithmetic, no model, no
records.

:mod:`.verdict` (the rule's records and :func:`compute_margins`), :mod:`.settled` (questions
decided before scoring), :mod:`.policies` (the policies and :meth:`Policy.verdict`, the one
executor of the rule) and :mod:`.replay` (a recorded Decision replayed under any policy).
"""

from trustmargin_integrations.rule.policies import (
    POLICIES,
    AlwaysDirect,
    AlwaysRag,
    BindOnly,
    Policy,
    PolicyName,
    PolicyRecord,
    PolicyVerdict,
    PriorOnly,
    Rule,
    WeightedBind,
    apply_policy,
    exceeds,
    known_policy_name,
)
from trustmargin_integrations.rule.settled import SETTLED, settle, settle_among
from trustmargin_integrations.rule.verdict import (
    PAPER_LAMBDA_BIND,
    PAPER_TAU,
    HasMargins,
    MarginPair,
    Margins,
    ThreeViews,
    Verdict,
    compute_margins,
)

__all__ = [
    "PAPER_LAMBDA_BIND", "PAPER_TAU", "POLICIES", "SETTLED", "AlwaysDirect", "AlwaysRag",
    "BindOnly", "HasMargins", "MarginPair", "Margins", "Policy", "PolicyName", "PolicyRecord",
    "PolicyVerdict", "PriorOnly", "Rule", "ThreeViews", "Verdict", "WeightedBind",
    "apply_policy", "compute_margins", "exceeds", "known_policy_name", "settle", "settle_among",
]
