"""Decision policies: who turns a scored question's margins into a verdict.

Each policy is one class here; defining it registers its name (:data:`POLICIES`), which is
the one vocabulary read by the config (``TrustMarginConfig.policy``), policy files, the
CLI and the Decision records. Old names still load, mapped in :data:`LEGACY_NAMES`.

The rule with several RAG-side candidates (say the answers of BM25-RAG, IRCoT and DTR), for
every margin policy:

    For each RAG candidate i the policy combines its margins against Direct into ``M_i``
    (the paper's rule: ``M_i = M_prior,i + lambda_bind * M_bind,i``). Keep Direct unless
    ``max_i M_i > tau``; otherwise keep the candidate with the largest ``M_i`` (a tie keeps
    the earlier candidate in the caller's list).

Why: each ``M_i`` is the pairwise evidence that candidate i should override Direct, on one
scale and against one threshold, so ``tau`` keeps the paper's meaning (Direct is the default
and is overridden sparsely). And since every margin is a difference of per-answer terms,
``M_i - M_j`` is exactly the margin of candidate i over candidate j computed directly (the
Direct terms cancel): the candidate with the largest ``M_i`` is the one that beats every
other candidate pairwise. With one candidate the rule is the pairwise rule, term for term.

:meth:`Policy.decide` is the one executor of that rule (the argmax and :func:`exceeds`, the
``M > tau`` comparison); :meth:`Policy.keeps_rag` is its vectorised form over numpy arrays of
pairwise margins (replay of cached runs, the domain check), and the calibration grid applies
:meth:`Rule.keeps_rag_grid` to a whole lambda x tau grid at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import core_schema

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.rule.verdict import (
    PAPER_LAMBDA_BIND,
    PAPER_TAU,
    Choice,
    HasMargins,
    Margins,
    Reason,
    Verdict,
)

POLICIES: dict[str, type[Policy]] = {}
"""Every policy by its name, in definition order (filled by :meth:`Policy.__init_subclass__`)."""

LEGACY_NAMES: dict[str, str] = {
    "paper": "rule", "fitted": "rule",  # policy files' kinds before one vocabulary
    "full": "rule", "no_bind": "prior_only", "no_prior": "weighted_bind",  # replay variants
}
"""Old names of policies (policy files, the ``variant`` of :func:`.replay.replay`) and the
policy each one is: the one place they are mapped."""


def exceeds(m: Any, tau: Any) -> Any:
    """Whether a margin overrides Direct: ``M > tau``, strictly (``M == tau`` keeps Direct,
    as in the paper). Works on floats and, elementwise, on numpy arrays."""
    return m > tau


class PolicyRecord(BaseModel):
    """A policy as JSON: its name and its numbers (None where it takes none)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    kind: str
    lambda_bind: float | None = None
    tau: float | None = None


@dataclass(frozen=True)
class Policy:
    """A decision policy and its numbers (validated: known name, finite numbers).

    Subclasses set :attr:`name`, :attr:`numbers` (which of ``lambda_bind`` and ``tau`` they
    take), :attr:`label_format`, and either :meth:`margin` (a margin policy: the argmax and
    ``M > tau`` of :meth:`decide` apply) or, with ``uses_margins = False``, :meth:`over` and
    :meth:`keeps_rag` (a policy that ignores margins). Build one by name with :meth:`of`, or
    with the class methods (``Policy.paper()``, ``Policy.fitted(0.4, -3.25)``, ...).

    Raises:
        InvalidInputError: a missing or extra number, or a non-finite one.
    """

    lambda_bind: float | None = None
    tau: float | None = None

    name: ClassVar[str]
    numbers: ClassVar[tuple[str, ...]] = ()
    label_format: ClassVar[str]
    uses_margins: ClassVar[bool] = True
    fixed_side: ClassVar[Choice | None] = None
    """The side this policy keeps whatever the margins (None: it decides on margins). A
    policy with a fixed side cannot change the answer, so the adapters run only that side
    and the arbiter generates only that side and scores nothing under it
    (:meth:`unscored`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            POLICIES[cls.name] = cls

    def __post_init__(self) -> None:
        for field in ("lambda_bind", "tau"):
            value = getattr(self, field)
            if field not in self.numbers:
                if value is not None:
                    raise InvalidInputError(f"policy.{field}", f"policy {self.name!r} takes "
                                            f"no {field}", f"leave {field} unset")
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInputError(f"policy.{field}", f"policy {self.name!r} needs a "
                                        f"number, got {value!r}", f"pass {field} as a float")
            if not math.isfinite(value):
                # NaN would make every comparison false (always Direct), inf one side always.
                raise InvalidInputError(f"policy.{field}", f"must be finite, got {value!r}",
                                        f"pass a finite {field} (refit the policy)")
            object.__setattr__(self, field, float(value))

    # -- building -------------------------------------------------------------------------

    @staticmethod
    def of(kind: str, lambda_bind: float | None = None, tau: float | None = None, *,
           drop_unused: bool = False) -> Policy:
        """The policy named ``kind`` (a name of :data:`POLICIES` or an old one of
        :data:`LEGACY_NAMES`) with its numbers.

        ``drop_unused``: ignore the numbers the policy does not take (a config or a
        recorded Decision carries both, whatever the policy); otherwise they are refused.

        Raises:
            InvalidInputError: unknown name, the old name ``"paper"`` with other numbers
                than the paper's, or a bad number.
        """
        if kind == "paper" and (lambda_bind, tau) not in ((None, None),
                                                          (PAPER_LAMBDA_BIND, PAPER_TAU)):
            raise InvalidInputError("policy", f"the paper's rule has lambda_bind "
                                    f"{PAPER_LAMBDA_BIND:g} and tau {PAPER_TAU:g}, not "
                                    f"{(lambda_bind, tau)}", "use kind 'rule' for other numbers")
        if kind == "paper":
            lambda_bind, tau = PAPER_LAMBDA_BIND, PAPER_TAU
        cls = POLICIES.get(LEGACY_NAMES.get(kind, kind))
        if cls is None:
            raise InvalidInputError("policy.kind", f"unknown policy {kind!r}",
                                    f"use one of {', '.join(POLICIES)}")
        given = {"lambda_bind": lambda_bind, "tau": tau}
        if drop_unused:
            given = {k: v for k, v in given.items() if k in cls.numbers}
        return cls(**given)

    @classmethod
    def paper(cls) -> Policy:
        """The paper's rule with its numbers (lambda_bind 0.5, tau -1.5)."""
        return Rule(PAPER_LAMBDA_BIND, PAPER_TAU)

    @classmethod
    def fitted(cls, lambda_bind: float, tau: float) -> Policy:
        """The paper's rule with fitted numbers."""
        return Rule(lambda_bind, tau)

    @classmethod
    def bind_only(cls, tau: float) -> Policy:
        """Keep RAG iff ``M_bind > tau`` (the rule without M_prior)."""
        return BindOnly(tau=tau)

    @classmethod
    def prior_only(cls, tau: float) -> Policy:
        """Keep RAG iff ``M_prior > tau`` (the rule without M_bind)."""
        return PriorOnly(tau=tau)

    @classmethod
    def always_rag(cls) -> Policy:
        """Always the RAG answer (plain RAG)."""
        return AlwaysRag()

    @classmethod
    def always_direct(cls) -> Policy:
        """Always the closed-book answer."""
        return AlwaysDirect()

    @classmethod
    def from_setting(cls, policy: str, lambda_bind: float, tau: float) -> Policy:
        """The policy a config (or a recorded Decision) names, with the numbers it takes of
        the config's ``lambda_bind`` and ``tau``."""
        return cls.of(policy, lambda_bind, tau, drop_unused=True)

    # -- reading --------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        """The policy's name (its key in :data:`POLICIES`)."""
        return self.name

    @property
    def setting(self) -> dict[str, float | str]:
        """The config values that apply this policy (``TrustMarginConfig`` fields ``policy``,
        and ``lambda_bind`` / ``tau`` where the policy has them): the inverse of
        :meth:`from_setting`."""
        out: dict[str, float | str] = {"policy": self.name}
        out.update({k: getattr(self, k) for k in self.numbers})
        return out

    @property
    def label(self) -> str:
        """A short human name, numbers included (e.g. ``M_bind > -3``)."""
        return self.label_format.format(lam=self.lambda_bind or 0.0, tau=self.tau or 0.0)

    def record(self) -> dict[str, Any]:
        """The policy as JSON (:class:`PolicyRecord`'s fields)."""
        return {"kind": self.name, "lambda_bind": self.lambda_bind, "tau": self.tau}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        """A pydantic field of type Policy reads a :class:`PolicyRecord` (or a Policy) and
        writes :meth:`record`."""
        def validate(value: Any, inner: core_schema.ValidatorFunctionWrapHandler) -> Policy:
            if isinstance(value, Policy):
                return value
            record = inner(value)
            return Policy.of(record.kind, record.lambda_bind, record.tau)

        return core_schema.no_info_wrap_validator_function(
            validate, handler.generate_schema(PolicyRecord),
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda policy: policy.record()))

    # -- deciding -------------------------------------------------------------------------

    def margin(self, m_prior: Any, m_bind: Any) -> Any:
        """``M`` of one candidate from its two margins (floats or numpy arrays)."""
        raise NotImplementedError(f"policy {self.name!r} combines no margins")

    def decide(self, margins: Sequence[HasMargins | None]) -> Verdict:
        """The policy over one scored question's RAG candidates: keep Direct unless
        ``max_i M_i > tau``, else the candidate with the largest ``M_i`` (a tie keeps the
        earlier one).

        Args:
            margins: each candidate's margins against Direct, in the caller's order; None
                for a candidate that cannot win (a blank one).

        Returns:
            A verdict whose ``candidate`` is the best-margin candidate (kept when ``choice``
            is ``"rag"``) and whose ``margins`` are that candidate's, ``M`` this policy's.

        Raises:
            ValueError: no candidate has margins (settle such questions with
                :func:`~.settled.settle_among`).
        """
        if not self.uses_margins:
            return self.over(Policy.paper().decide(margins))
        best: int | None = None
        best_key = -math.inf
        for i, pair in enumerate(margins):
            if pair is None:
                continue
            m = self.margin(pair.m_prior, pair.m_bind)
            # A NaN margin cannot beat a real one (every comparison with NaN is false), but
            # it must not block the real margins after it either: rank it as -inf.
            key = -math.inf if math.isnan(m) else m
            if best is None or key > best_key:  # strict: a tie keeps the earlier candidate
                best, best_key = i, key
        if best is None:
            raise ValueError("no candidate has margins: settle the question instead")
        pair = margins[best]
        assert pair is not None
        m = self.margin(pair.m_prior, pair.m_bind)
        use_rag = bool(exceeds(m, self.tau))
        return Verdict(choice="rag" if use_rag else "direct",
                       reason="margin_above_tau" if use_rag else "margin_at_or_below_tau",
                       margins=Margins(m_prior=pair.m_prior, m_bind=pair.m_bind, m=m),
                       candidate=best)

    def over(self, paper: Verdict) -> Verdict:
        """A policy that ignores margins: its verdict given the paper rule's (which names
        the candidate a single source keeps or describes)."""
        raise NotImplementedError(f"policy {self.name!r} decides on margins")

    def unscored(self, candidates: int) -> Verdict | None:
        """The verdict this policy reaches with no margin at all, for a question with
        ``candidates`` RAG candidates; None when the margins can change what is kept (a
        margin policy, or always-RAG choosing among several candidates: it keeps the one the
        paper's rule ranks highest).

        The arbiter scores nothing for a question this returns a verdict for
        (:mod:`trustmargin_integrations.arbiter.core`), and generates only the kept side.
        """
        return None

    def keeps_rag(self, m_prior: Any, m_bind: Any) -> Any:
        """:meth:`decide` over numpy arrays of pairwise margins (one candidate per
        question): per element, does the policy keep the RAG answer."""
        return exceeds(self.margin(m_prior, m_bind), self.tau)

    def keeps_rag_over(self, m_prior: Any, m_bind: Any, taus: Sequence[float]) -> Any:
        """:meth:`keeps_rag` at every threshold of ``taus`` at once (question x tau; this
        policy's own ``tau`` is not used): the domain check's tau grid of a margin policy."""
        margin = np.asarray(self.margin(np.asarray(m_prior), np.asarray(m_bind)))
        return exceeds(margin[:, None], np.asarray(taus, dtype=float)[None, :])


@dataclass(frozen=True)
class Rule(Policy):
    """The paper's rule: keep RAG iff ``M_prior + lambda_bind * M_bind > tau``."""

    name: ClassVar[str] = "rule"
    numbers: ClassVar[tuple[str, ...]] = ("lambda_bind", "tau")

    @staticmethod
    def margin_at(m_prior: Any, m_bind: Any, lambda_bind: Any) -> Any:
        """``M`` at a weight (floats or arrays: the calibration grid passes every lambda)."""
        return m_prior + lambda_bind * m_bind

    def margin(self, m_prior: Any, m_bind: Any) -> Any:
        """``M_prior + lambda_bind * M_bind``."""
        return self.margin_at(m_prior, m_bind, self.lambda_bind)

    @classmethod
    def keeps_rag_grid(cls, m_prior: float, m_bind: float, lambdas: Sequence[float],
                       taus: Sequence[float]) -> Any:
        """One question's choice under every (lambda_bind, tau) of a grid (lambdas x taus,
        True: RAG kept): :meth:`keeps_rag` of every cell at once, for the calibration."""
        margin = cls.margin_at(m_prior, m_bind, np.asarray(lambdas, dtype=float)[:, None])
        return exceeds(margin, np.asarray(taus, dtype=float)[None, :])

    @property
    def label(self) -> str:
        """``TrustMargin (paper: ...)`` at the paper's numbers, ``(fitted: ...)`` at others."""
        which = "paper" if (self.lambda_bind, self.tau) == (PAPER_LAMBDA_BIND, PAPER_TAU) \
            else "fitted"
        return f"TrustMargin ({which}: lambda {self.lambda_bind:g}, tau {self.tau:g})"


@dataclass(frozen=True)
class PriorOnly(Policy):
    """Keep RAG iff ``M_prior > tau`` (the rule without M_bind; the paper's ablation)."""

    name: ClassVar[str] = "prior_only"
    numbers: ClassVar[tuple[str, ...]] = ("tau",)
    label_format: ClassVar[str] = "M_prior > {tau:g}"

    def margin(self, m_prior: Any, m_bind: Any) -> Any:
        """``M_prior``."""
        return m_prior


@dataclass(frozen=True)
class BindOnly(Policy):
    """Keep RAG iff ``M_bind > tau`` (the rule without M_prior, unweighted)."""

    name: ClassVar[str] = "bind_only"
    numbers: ClassVar[tuple[str, ...]] = ("tau",)
    label_format: ClassVar[str] = "M_bind > {tau:g}"

    def margin(self, m_prior: Any, m_bind: Any) -> Any:
        """``M_bind``."""
        return m_bind


@dataclass(frozen=True)
class WeightedBind(Policy):
    """Keep RAG iff ``lambda_bind * M_bind > tau``: the paper's ablation "w/o M_prior" at the
    rule's own numbers (``BindOnly`` at ``tau / lambda_bind``, computed as the paper does)."""

    name: ClassVar[str] = "weighted_bind"
    numbers: ClassVar[tuple[str, ...]] = ("lambda_bind", "tau")
    label_format: ClassVar[str] = "{lam:g} * M_bind > {tau:g}"

    def margin(self, m_prior: Any, m_bind: Any) -> Any:
        """``lambda_bind * M_bind``."""
        return self.lambda_bind * m_bind


@dataclass(frozen=True)
class AlwaysRag(Policy):
    """Always the RAG answer (plain RAG). With several candidates, the one the paper's rule
    ranks highest (largest ``M``), so its answer is the RAG answer the rule itself offers."""

    name: ClassVar[str] = "always_rag"
    label_format: ClassVar[str] = "always-RAG"
    uses_margins: ClassVar[bool] = False
    fixed_side: ClassVar[Choice | None] = "rag"

    def over(self, paper: Verdict) -> Verdict:
        """RAG, the candidate the paper rule's verdict names (the first when it names none)."""
        return Verdict("rag", "policy_always_rag",
                       candidate=paper.candidate if paper.candidate is not None else 0)

    def unscored(self, candidates: int) -> Verdict | None:
        """The RAG answer of a pairwise question (or of a one-candidate list); None with
        several candidates (the margins choose which one is kept)."""
        return Verdict("rag", "policy_always_rag", candidate=0) if candidates == 1 else None

    def keeps_rag(self, m_prior: Any, m_bind: Any) -> Any:
        """True for every question."""
        return np.ones(np.shape(m_prior), dtype=bool)


@dataclass(frozen=True)
class AlwaysDirect(Policy):
    """Always the closed-book answer."""

    name: ClassVar[str] = "always_direct"
    label_format: ClassVar[str] = "always-Direct"
    uses_margins: ClassVar[bool] = False
    fixed_side: ClassVar[Choice | None] = "direct"

    def over(self, paper: Verdict) -> Verdict:
        """Direct; the verdict names the paper rule's candidate (the one a Decision
        describes)."""
        return Verdict("direct", "policy_always_direct", candidate=paper.candidate)

    def unscored(self, candidates: int) -> Verdict | None:
        """Direct, for every question (no RAG candidate is described: none was scored)."""
        return Verdict("direct", "policy_always_direct")

    def keeps_rag(self, m_prior: Any, m_bind: Any) -> Any:
        """False for every question."""
        return np.zeros(np.shape(m_prior), dtype=bool)


@dataclass(frozen=True)
class PolicyVerdict:
    """What a policy keeps for one question, and what the paper's rule would have kept.

    ``candidate`` is the kept RAG candidate's index (None when Direct is kept). ``rule`` is
    the deciding policy's verdict; ``paper`` is always the paper rule's verdict, for the audit.
    """

    policy: Policy
    rule: Verdict
    paper: Verdict

    @property
    def choice(self) -> Choice:
        """The side the policy keeps."""
        return self.rule.choice

    @property
    def candidate(self) -> int | None:
        """The kept RAG candidate (None: Direct)."""
        return self.rule.kept

    @property
    def reason(self) -> Reason:
        """Why the policy decided as it did."""
        return self.rule.reason

    @property
    def agrees_with_paper(self) -> bool:
        """True when the paper's rule keeps the same answer."""
        return (self.choice, self.candidate) == (self.paper.choice, self.paper.kept)


def apply_policy(policy: Policy, margins: Sequence[HasMargins | None],
                 settled: Verdict | None = None) -> PolicyVerdict:
    """Apply a policy to one question, with the paper rule's verdict for the audit.

    Args:
        policy: the policy.
        margins: each RAG candidate's margins (None for a blank one), as for
            :meth:`Policy.decide`; one entry for a pairwise question.
        settled: the verdict of :func:`~.settled.settle_among` when the question was settled
            before scoring. A margin policy keeps it (no number changes a settled question);
            a single source does not: always-RAG returns the RAG answer even where the rule
            keeps Direct, as plain RAG would (the domain check's baseline). The arbiter keeps a
            settled verdict under every policy and never asks one.
    """
    paper = settled or Policy.paper().decide(margins)
    if not policy.uses_margins:
        return PolicyVerdict(policy, policy.over(paper), paper)
    return PolicyVerdict(policy, settled or policy.decide(margins), paper)


def known_policy_name(value: str) -> str:
    """``value`` if it names a policy of :data:`POLICIES` (the config's and the records'
    check; old names are read only from files, by :meth:`Policy.of`)."""
    if value not in POLICIES:
        raise ValueError(f"unknown policy {value!r}; use one of {', '.join(POLICIES)}")
    return value


PolicyName = Annotated[str, AfterValidator(known_policy_name)]
"""A policy's name, as the config and the Decision records hold it."""
