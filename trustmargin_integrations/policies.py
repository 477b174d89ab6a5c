"""Decision policies, re-exported from :mod:`trustmargin_integrations.rule` (where each
policy is one class), and the domain check's candidate names.

``apply_policy`` here also takes ``(M_prior, M_bind)`` tuples, the positional form existing
callers pass; it is :func:`trustmargin_integrations.rule.apply_policy`.
"""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.rule import (
    POLICIES,
    HasMargins,
    MarginPair,
    Policy,
    PolicyVerdict,
    Verdict,
)
from trustmargin_integrations.rule import apply_policy as _apply_policy

__all__ = ["POLICIES", "Policy", "PolicyVerdict", "apply_policy"]


def apply_policy(policy: Policy, margins: Sequence[HasMargins | tuple[float, float] | None],
                 settled: Verdict | None = None) -> PolicyVerdict:
    """:func:`trustmargin_integrations.rule.apply_policy`, margins given as records or as
    ``(M_prior, M_bind)`` tuples."""
    pairs = [MarginPair(*m) if isinstance(m, tuple) else m for m in margins]
    return _apply_policy(policy, pairs, settled)
