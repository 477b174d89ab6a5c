"""The decision rule of TrustMargin (Section 3 of the paper): pure arithmetic, no model, no
records.

* :mod:`.verdict`: the named records the rule reads and writes (:class:`MarginPair`,
  :class:`Margins`, :class:`Verdict`), :func:`compute_margins` and the paper's numbers;
* :mod:`.settled`: questions decided before scoring (no evidence, blank or agreeing answers);
* :mod:`.policies`: the policies, one class each, registered by name (the one vocabulary of
  config, policy files, CLI and records), and :meth:`Policy.decide`, the one executor of
  the rule (its vectorised form: :meth:`Policy.keeps_rag`);
* :mod:`.replay`: a recorded Decision replayed under any policy (``replay``,
  ``replay_winner``, ``replay_answer``, ``kept_rag``), read through a protocol: the records
  never import the rule and carry no rule of their own.
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
