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
from typing import Literal

from trustmargin_integrations.rule import (
    SETTLED,
    Choice,
    MarginPair,
    Margins,
    Policy,
    Reason,
    ThreeViews,
    Verdict,
    compute_margins,
    settle,
    settle_among,
)

Variant = Literal["full", "no_prior", "no_bind"]
"""The paper's rule or one of its ablations (w/o M_prior, w/o M_bind): old names of the
policies ``rule``, ``weighted_bind`` and ``prior_only``."""
VARIANTS: tuple[Variant, ...] = ("full", "no_prior", "no_bind")

__all__ = ["SETTLED", "VARIANTS", "Choice", "Margins", "Reason", "ThreeViews", "Variant",
           "Verdict", "compute_margins", "decide", "decide_among", "settle", "settle_among",
           "variant_policy"]


def variant_policy(lambda_bind: float, tau: float, variant: Variant = "full") -> Policy:
    """The policy an ablation variant names, at ``lambda_bind`` and ``tau``.

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; use 'full', 'no_prior' or 'no_bind'")
    return Policy.of(variant, lambda_bind, tau, drop_unused=True)


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
