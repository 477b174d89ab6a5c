"""The rule over positional margins: ``(M_prior, M_bind)`` tuples and a variant name
(``full``, ``no_prior``, ``no_bind``), the form of the package's top-level :func:`decide`.

Nothing is decided here: each function builds the :class:`~.policies.Policy` its variant
names (:data:`~.policies.LEGACY_NAMES`) and calls :meth:`~.policies.Policy.decide`.
"""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.rule.policies import Policy, PolicyVerdict
from trustmargin_integrations.rule.policies import apply_policy as _apply_policy
from trustmargin_integrations.rule.replay import Variant, variant_policy
from trustmargin_integrations.rule.verdict import HasMargins, MarginPair, Verdict

__all__ = ["apply_policy", "decide", "decide_among"]


def _pairs(margins: Sequence[HasMargins | tuple[float, float] | None]) -> list[HasMargins | None]:
    return [MarginPair(*m) if isinstance(m, tuple) else m for m in margins]


def decide_among(
    margins: Sequence[tuple[float, float] | None],
    lambda_bind: float,
    tau: float,
    variant: Variant = "full",
) -> Verdict:
    """:meth:`Policy.decide` of ``variant`` over ``(M_prior_i, M_bind_i)`` tuples (None for
    a candidate that cannot win)."""
    return variant_policy(lambda_bind, tau, variant).decide(_pairs(margins))


def decide(
    m_prior: float, m_bind: float, lambda_bind: float, tau: float, variant: Variant = "full"
) -> Verdict:
    """The one-candidate case of :func:`decide_among`."""
    return decide_among([(m_prior, m_bind)], lambda_bind, tau, variant)


def apply_policy(policy: Policy, margins: Sequence[HasMargins | tuple[float, float] | None],
                 settled: Verdict | None = None) -> PolicyVerdict:
    """:func:`~.policies.apply_policy` with margins given as records or as tuples."""
    return _apply_policy(policy, _pairs(margins), settled)
