"""Decision policies: who decides a question once its margins are known.

The paper's rule with its numbers or fitted ones, one margin alone against a threshold, or one
source always. A policy is chosen per domain by :mod:`~trustmargin_integrations.evaluation.policy`
(``trustmargin check``) and applied by the arbiter through :func:`apply_policy`, which goes
through the one rule (:func:`~trustmargin_integrations.margins.decide_among`); whichever policy
decides, the paper's own verdict is kept for the audit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from trustmargin_integrations.config import (
    PAPER_LAMBDA_BIND,
    PAPER_TAU,
    DecisionPolicy,
    OneMarginPolicy,
    SingleSourcePolicy,
)
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.margins import Choice, Variant, Verdict, decide_among

PolicyKind = Literal["paper", "fitted", OneMarginPolicy, SingleSourcePolicy]
"""The candidate policies: the paper's rule (0.5, -1.5), the rule with fitted lambda_bind and
tau, one margin against a threshold (``M_bind > tau``, ``M_prior > tau``), one source always."""

RULE_KINDS: tuple[PolicyKind, ...] = ("paper", "fitted", "prior_only", "bind_only")
"""The policies that apply the margin rule (simplest first: the order ties are broken in)."""
SINGLE_SOURCE_KINDS: tuple[PolicyKind, ...] = ("always_rag", "always_direct")
"""The policies that ignore the margins (always-RAG first: a tie keeps plain RAG)."""
POLICY_KINDS: tuple[PolicyKind, ...] = RULE_KINDS + SINGLE_SOURCE_KINDS

# The rule each margin policy replays through decide_among: (variant, lambda_bind). Bind-only
# compares M_bind itself with tau, so its weight is 1; prior-only ignores the weight.
_RULE_OF: dict[PolicyKind, tuple[Variant, float | None]] = {
    "paper": ("full", None), "fitted": ("full", None),
    "bind_only": ("no_prior", 1.0), "prior_only": ("no_bind", 1.0),
}
_LABELS: dict[PolicyKind, str] = {
    "paper": "TrustMargin (paper: lambda {lam:g}, tau {tau:g})",
    "fitted": "TrustMargin (fitted: lambda {lam:g}, tau {tau:g})",
    "bind_only": "M_bind > {tau:g}",
    "prior_only": "M_prior > {tau:g}",
    "always_rag": "always-RAG",
    "always_direct": "always-Direct",
}


@dataclass(frozen=True)
class Policy:
    """A decision policy and its numbers (validated: known kind, finite numbers).

    ``paper`` carries the paper's (lambda_bind, tau) and ``fitted`` its own; ``bind_only`` and
    ``prior_only`` carry only ``tau``; ``always_rag`` / ``always_direct`` carry nothing. Build
    one with the class methods (``Policy.paper()``, ``Policy.fitted(0.4, -3.25)``, ...).

    Raises:
        InvalidInputError: unknown kind, a missing or extra number, or a non-finite one.
    """

    kind: PolicyKind
    lambda_bind: float | None = None
    tau: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise InvalidInputError("policy.kind", f"unknown policy {self.kind!r}",
                                    f"use one of {', '.join(POLICY_KINDS)}")
        if self.kind == "paper":
            given = (self.lambda_bind, self.tau)
            if given not in ((None, None), (PAPER_LAMBDA_BIND, PAPER_TAU)):
                raise InvalidInputError("policy", f"the paper's rule has lambda_bind "
                                        f"{PAPER_LAMBDA_BIND:g} and tau {PAPER_TAU:g}, "
                                        f"not {given}", "use kind 'fitted' for other numbers")
            object.__setattr__(self, "lambda_bind", PAPER_LAMBDA_BIND)
            object.__setattr__(self, "tau", PAPER_TAU)
        needs = {"paper": ("lambda_bind", "tau"), "fitted": ("lambda_bind", "tau"),
                 "bind_only": ("tau",), "prior_only": ("tau",)}.get(self.kind, ())
        for name in ("lambda_bind", "tau"):
            value = getattr(self, name)
            if name not in needs:
                if value is not None:
                    raise InvalidInputError(f"policy.{name}", f"policy {self.kind!r} takes no "
                                            f"{name}", f"leave {name} unset")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInputError(f"policy.{name}", f"policy {self.kind!r} needs a "
                                        f"number, got {value!r}", f"pass {name} as a float")
            if not math.isfinite(value):
                # NaN would make every comparison false (always Direct), inf one side always.
                raise InvalidInputError(f"policy.{name}", f"must be finite, got {value!r}",
                                        f"pass a finite {name} (refit the policy)")
            object.__setattr__(self, name, float(value))

    @classmethod
    def paper(cls) -> Policy:
        """The paper's rule with its defaults (config.PAPER_LAMBDA_BIND, config.PAPER_TAU)."""
        return cls("paper")

    @classmethod
    def fitted(cls, lambda_bind: float, tau: float) -> Policy:
        """The paper's rule with fitted numbers."""
        return cls("fitted", lambda_bind, tau)

    @classmethod
    def bind_only(cls, tau: float) -> Policy:
        """Keep RAG iff ``M_bind > tau`` (the rule without M_prior)."""
        return cls("bind_only", tau=tau)

    @classmethod
    def prior_only(cls, tau: float) -> Policy:
        """Keep RAG iff ``M_prior > tau`` (the rule without M_bind)."""
        return cls("prior_only", tau=tau)

    @classmethod
    def always_rag(cls) -> Policy:
        """Always the RAG answer (plain RAG)."""
        return cls("always_rag")

    @classmethod
    def always_direct(cls) -> Policy:
        """Always the closed-book answer."""
        return cls("always_direct")

    @classmethod
    def from_setting(cls, policy: DecisionPolicy, lambda_bind: float, tau: float) -> Policy:
        """The policy a config (or a recorded Decision) names: ``"rule"`` with the paper's
        numbers is :meth:`paper`, with others :meth:`fitted`; a one-margin policy takes
        ``tau``; a single source takes nothing."""
        if policy == "rule":
            if (lambda_bind, tau) == (PAPER_LAMBDA_BIND, PAPER_TAU):
                return cls.paper()
            return cls.fitted(lambda_bind, tau)
        if policy in ("bind_only", "prior_only"):
            return cls(policy, tau=tau)
        return cls(policy)

    @property
    def setting(self) -> dict[str, float | str]:
        """The config values that apply this policy (``TrustMarginConfig`` fields
        ``policy``, and ``lambda_bind`` / ``tau`` where the policy has them): the inverse of
        :meth:`from_setting`."""
        if self.kind in ("paper", "fitted"):
            return {"policy": "rule", "lambda_bind": self.lambda_bind, "tau": self.tau}
        if self.kind in ("bind_only", "prior_only"):
            return {"policy": self.kind, "tau": self.tau}  # type: ignore[dict-item]
        return {"policy": self.kind}

    @property
    def uses_margins(self) -> bool:
        """True for the margin rules, False for a single source."""
        return self.kind in RULE_KINDS

    @property
    def label(self) -> str:
        """A short human name, numbers included (e.g. ``M_bind > -3``)."""
        return _LABELS[self.kind].format(lam=self.lambda_bind or 0.0, tau=self.tau or 0.0)

    def rule(self) -> tuple[float, float, Variant]:
        """``(lambda_bind, tau, variant)`` for :func:`decide_among` (margin policies only)."""
        if not self.uses_margins:
            raise ValueError(f"policy {self.kind!r} applies no rule")
        variant, weight = _RULE_OF[self.kind]
        lam = self.lambda_bind if weight is None else weight
        return lam, self.tau, variant  # type: ignore[return-value]


@dataclass(frozen=True)
class PolicyVerdict:
    """What a policy keeps for one question, and what the paper's rule would have kept.

    ``candidate`` is the kept RAG candidate's index (None when Direct is kept). ``rule`` is
    the deciding rule's verdict (None for a single-source policy, which consults no margin);
    ``paper`` is always the paper rule's verdict, for the audit.
    """

    policy: Policy
    choice: Choice
    candidate: int | None
    rule: Verdict | None
    paper: Verdict

    @property
    def agrees_with_paper(self) -> bool:
        """True when the paper's rule keeps the same answer."""
        return (self.choice, self.candidate) == (
            self.paper.choice, self.paper.candidate if self.paper.choice == "rag" else None)


def apply_policy(
    policy: Policy,
    margins: Sequence[tuple[float, float] | None],
    settled: Verdict | None = None,
) -> PolicyVerdict:
    """Apply a policy to one question, through the one rule (:func:`decide_among`).

    Args:
        policy: the policy.
        margins: ``(M_prior_i, M_bind_i)`` per RAG candidate (None for a blank one), as for
            :func:`decide_among`; one entry for a pairwise question.
        settled: the verdict of :func:`settle_among` when the question was settled before
            scoring. A margin policy keeps it (no number changes a settled question, as in
            ``Decision.replay``); a single-source policy does not: always-RAG returns the RAG
            answer even where the rule would keep Direct, as plain RAG would.

    Always-RAG with several candidates keeps the one the paper's rule ranks highest (largest
    ``M``; a settled question's kept candidate, else the first), so its answer is the RAG
    answer the rule itself would offer.
    """
    paper = settled or decide_among(margins, PAPER_LAMBDA_BIND, PAPER_TAU)
    if policy.kind == "always_direct":
        return PolicyVerdict(policy, "direct", None, None, paper)
    if policy.kind == "always_rag":
        ranked = paper.candidate if paper.candidate is not None else 0
        return PolicyVerdict(policy, "rag", ranked, None, paper)
    rule = settled or decide_among(margins, *policy.rule())
    return PolicyVerdict(policy, rule.choice, rule.candidate if rule.choice == "rag" else None,
                         rule, paper)
