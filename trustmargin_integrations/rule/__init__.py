"""The decision rule of TrustMargin (Section 3 of the paper): pure arithmetic, no model, no
records.

:mod:`.verdict` (the rule's records and :func:`compute_margins`), :mod:`.settled` (questions
decided before scoring), :mod:`.policies` (the policies and :meth:`Policy.decide`) and
:mod:`.replay` (a recorded Decision replayed under any policy); :mod:`.positional` is the
``(M_prior, M_bind)``-tuple form of the top-level :func:`decide`.
"""

from trustmargin_integrations.rule.policies import (
    LEGACY_NAMES,
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
    Choice,
    HasMargins,
    MarginPair,
    Margins,
    Reason,
    ThreeViews,
    Verdict,
    compute_margins,
)

__all__ = [
    "LEGACY_NAMES", "PAPER_LAMBDA_BIND", "PAPER_TAU", "POLICIES", "SETTLED", "AlwaysDirect",
    "AlwaysRag", "BindOnly", "Choice", "HasMargins", "MarginPair", "Margins", "Policy",
    "PolicyName", "PolicyRecord", "PolicyVerdict", "PriorOnly", "Reason", "Rule",
    "ThreeViews", "Verdict", "WeightedBind", "apply_policy", "compute_margins", "exceeds",
    "known_policy_name", "settle", "settle_among",
]
