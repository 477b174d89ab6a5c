"""The rule's records and settled cases, re-exported from :mod:`trustmargin_integrations.rule`
(where the rule lives), and the positional form of the rule kept for existing callers.

``decide_among(margins, lambda_bind, tau, variant)`` with ``(M_prior, M_bind)`` tuples and a
``variant`` name is :meth:`~trustmargin_integrations.rule.Policy.decide` of the policy the
variant names (:data:`~trustmargin_integrations.rule.LEGACY_NAMES`): it decides nothing
itself. New code builds a :class:`~trustmargin_integrations.rule.Policy` and passes
:class:`~trustmargin_integrations.rule.MarginPair` records.
"""

from __future__ import annotations

from collections.abc import Sequence

from trustmargin_integrations.rule import (
    SETTLED,
    Choice,
    MarginPair,
    Margins,
    Reason,
    ThreeViews,
    Verdict,
    compute_margins,
    settle,
    settle_among,
)
from trustmargin_integrations.rule.replay import VARIANTS, Variant, variant_policy

__all__ = ["SETTLED", "VARIANTS", "Choice", "Margins", "Reason", "ThreeViews", "Variant",
           "Verdict", "compute_margins", "decide", "decide_among", "settle", "settle_among",
           "variant_policy"]


def decide_among(
    margins: Sequence[tuple[float, float] | None],
    lambda_bind: float,
    tau: float,
    variant: Variant = "full",
) -> Verdict:
    """:meth:`Policy.decide` of ``variant`` over ``(M_prior_i, M_bind_i)`` tuples (None for
    a candidate that cannot win)."""
    pairs = [None if m is None else MarginPair(*m) for m in margins]
    return variant_policy(lambda_bind, tau, variant).decide(pairs)


def decide(
    m_prior: float, m_bind: float, lambda_bind: float, tau: float, variant: Variant = "full"
) -> Verdict:
    """The one-candidate case of :func:`decide_among`."""
    return decide_among([(m_prior, m_bind)], lambda_bind, tau, variant)
