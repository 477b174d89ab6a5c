"""Tables and diagnostics replayed from cached Decisions (no model calls).

The methods of the paper's tables (``direct``, ``rag``, ``trustmargin``, the ablations
``no_prior`` / ``no_bind``, ``oracle``) are pure functions of the cached likelihoods; dataset
averages are the mean of the per-dataset numbers, as in the paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean, median

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.metrics import (
    contains_gold,
    exact_match,
    mean_x100,
    token_f1,
)
from trustmargin_integrations.evaluation.runner import EvalRecord, NoiseRecord
from trustmargin_integrations.policy_file import Objective, check_objective
from trustmargin_integrations.rule import PAPER_LAMBDA_BIND, PAPER_TAU
from trustmargin_integrations.rule.replay import replay
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.vocabulary import Side

METHODS: tuple[str, ...] = ("direct", "rag", "trustmargin", "no_prior", "no_bind", "oracle")
METHOD_LABELS: dict[str, str] = {
    "direct": "Direct",
    "rag": "BM25-RAG",
    "trustmargin": "TrustMargin",
    "no_prior": "TrustMargin w/o M_prior",
    "no_bind": "TrustMargin w/o M_bind",
    "oracle": "Oracle(Direct, RAG)",
}
METHOD_POLICIES: dict[str, str] = {
    "trustmargin": "rule", "no_prior": "weighted_bind", "no_bind": "prior_only"}
"""The policy (a name of :data:`~trustmargin_integrations.rule.POLICIES`) each rule column of
the paper's tables replays: the rule and its two ablations at the table's numbers."""
DEFAULT_LAMBDA: float = PAPER_LAMBDA_BIND
DEFAULT_TAU: float = PAPER_TAU
GRID_LAMBDAS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
GRID_TAUS: tuple[float, ...] = (-3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5)


@dataclass(frozen=True)
class GradedDecision:
    """One example's candidate scores against gold (0..1) and its cached decision: token F1,
    exact match and ``contains`` (a gold answer stated in the text, :func:`contains_gold`)."""

    f1_direct: float
    f1_rag: float
    em_direct: float
    em_rag: float
    contains_direct: float
    contains_rag: float
    decision: Decision

    def f1(self, choice: Side) -> float:
        """F1 of the chosen candidate."""
        return self.f1_rag if choice == "rag" else self.f1_direct

    def em(self, choice: Side) -> float:
        """EM of the chosen candidate."""
        return self.em_rag if choice == "rag" else self.em_direct

    def sides(self, metric: Objective) -> tuple[float, float]:
        """(Direct, RAG) scores under ``metric``."""
        metric = check_objective(metric)
        if metric == "f1":
            return self.f1_direct, self.f1_rag
        if metric == "em":
            return self.em_direct, self.em_rag
        return self.contains_direct, self.contains_rag


def score_decision(decision: Decision, gold: Sequence[str], *, whole_texts: bool = False
                   ) -> GradedDecision:
    """Score both candidates of one decision against the gold aliases.

    ``whole_texts``: grade each side's text as the user's chain gave it (a run of a chain's
    own answers), not the part the arbiter compared (``direct_answer``/``rag_answer`` hold
    that part, e.g. the differing words); the text is what the chain returns to its user.
    """
    direct, rag = ((decision.given_text("direct"), decision.given_text("rag")) if whole_texts
                   else (decision.direct_answer, decision.rag_answer))
    return GradedDecision(token_f1(direct, gold), token_f1(rag, gold), exact_match(direct, gold),
                  exact_match(rag, gold), contains_gold(direct, gold), contains_gold(rag, gold),
                  decision)


def score_records(records: Sequence[EvalRecord], *, whole_texts: bool = False
                  ) -> list[GradedDecision]:
    """Score every record's two candidates once; methods then only pick a side
    (``whole_texts``: see :func:`score_decision`)."""
    return [score_decision(r.decision, r.example.answers, whole_texts=whole_texts)
            for r in records]


def method_scores(
    scored: Sequence[GradedDecision], lambda_bind: float = DEFAULT_LAMBDA, tau: float = DEFAULT_TAU
) -> dict[str, tuple[float, float]]:
    """(F1, EM) x100 of every method in :data:`METHODS`."""
    return {method: (mean_x100(f1s), mean_x100(ems))
            for method, (f1s, ems) in per_question_scores(scored, lambda_bind, tau).items()}


def per_question_scores(
    scored: Sequence[GradedDecision], lambda_bind: float = DEFAULT_LAMBDA, tau: float = DEFAULT_TAU,
    methods: Sequence[str] = METHODS,
) -> dict[str, tuple[list[float], list[float]]]:
    """Per-question (F1 list, EM list), 0..1, of each method (the bootstrap's input)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for method in methods:
        f1s, ems = [], []
        for s in scored:
            if method == "oracle":
                f1s.append(max(s.f1_direct, s.f1_rag))
                ems.append(max(s.em_direct, s.em_rag))
                continue
            if method in ("direct", "rag"):
                choice: Side = "direct" if method == "direct" else "rag"
            else:
                choice = replay(s.decision, lambda_bind=lambda_bind, tau=tau,
                                kind=METHOD_POLICIES[method])
            f1s.append(s.f1(choice))
            ems.append(s.em(choice))
        out[method] = (f1s, ems)
    return out


def average_rows(rows: Mapping[str, Mapping[str, tuple[float, float]]]
                 ) -> dict[str, tuple[float, float]]:
    """Arithmetic mean over datasets of per-dataset (F1, EM) rows."""
    names = list(rows)
    methods = list(rows[names[0]])
    return {m: (mean(rows[n][m][0] for n in names), mean(rows[n][m][1] for n in names))
            for m in methods}


@dataclass(frozen=True)
class ArbitrationDiagnostics:
    """The paper's "Source-arbitration diagnostics" row for one dataset."""

    oracle_gap_f1: float
    oracle_gap_em: float
    gap_closed_f1: float | None
    gap_closed_em: float | None
    d_better_to_d: float | None
    r_better_to_r: float | None
    n_d_better: int
    n_r_better: int
    rag_selection_rate: float
    n: int


def _closed(method: float, best: float, oracle: float) -> float | None:
    gap = oracle - best
    return 100.0 * (method - best) / gap if gap > 1e-12 else None


def arbitration_diagnostics(
    scored: Sequence[GradedDecision], lambda_bind: float = DEFAULT_LAMBDA, tau: float = DEFAULT_TAU
) -> ArbitrationDiagnostics:
    """Oracle gap, gap closed, and source-selection rates on strict (F1) disagreements."""
    table = method_scores(scored, lambda_bind, tau)
    best_f1 = max(table["direct"][0], table["rag"][0])
    best_em = max(table["direct"][1], table["rag"][1])
    d_better = [s for s in scored if s.f1_direct > s.f1_rag]
    r_better = [s for s in scored if s.f1_rag > s.f1_direct]
    picks = [replay(s.decision, lambda_bind=lambda_bind, tau=tau) for s in scored]

    def rate(cases: Sequence[GradedDecision], want: Side) -> float | None:
        if not cases:
            return None
        hits = sum(replay(s.decision, lambda_bind=lambda_bind, tau=tau) == want for s in cases)
        return 100.0 * hits / len(cases)

    return ArbitrationDiagnostics(
        oracle_gap_f1=table["oracle"][0] - best_f1,
        oracle_gap_em=table["oracle"][1] - best_em,
        gap_closed_f1=_closed(table["trustmargin"][0], best_f1, table["oracle"][0]),
        gap_closed_em=_closed(table["trustmargin"][1], best_em, table["oracle"][1]),
        d_better_to_d=rate(d_better, "direct"),
        r_better_to_r=rate(r_better, "rag"),
        n_d_better=len(d_better),
        n_r_better=len(r_better),
        rag_selection_rate=100.0 * picks.count("rag") / len(picks) if picks else 0.0,
        n=len(scored),
    )


@dataclass(frozen=True)
class Recovery:
    """Available vs realized oracle F1 gain on one side's favored cases (F1 points, x100).

    Gains are summed over the favored cases and divided by the dataset size, so they read as
    contributions to the dataset's F1: ``available`` is what perfect selection adds over
    always picking the other source, ``realized`` what TrustMargin adds.
    """

    n_cases: int
    available: float
    realized: float

    @property
    def ratio(self) -> float | None:
        """Realized / available (None when nothing was available)."""
        return self.realized / self.available if self.available > 1e-12 else None


def disagreement_recovery(
    scored: Sequence[GradedDecision], lambda_bind: float = DEFAULT_LAMBDA, tau: float = DEFAULT_TAU
) -> dict[str, Recovery]:
    """Recovery on Direct-favored and RAG-favored disagreement cases."""
    n = max(len(scored), 1)
    out = {}
    for side, other in (("direct", "rag"), ("rag", "direct")):
        cases = [s for s in scored
                 if s.f1(side) > s.f1(other)]  # type: ignore[arg-type]
        available = sum(s.f1(side) - s.f1(other) for s in cases)  # type: ignore[arg-type]
        realized = sum(s.f1(replay(s.decision, lambda_bind=lambda_bind, tau=tau)) - s.f1(other)  # type: ignore[arg-type]
                       for s in cases)
        out[f"{side}_favored"] = Recovery(len(cases), 100.0 * available / n,
                                          100.0 * realized / n)
    return out


def hyperparameter_grid(
    scored_by_dataset: Mapping[str, Sequence[GradedDecision]],
    lambdas: Sequence[float] = GRID_LAMBDAS,
    taus: Sequence[float] = GRID_TAUS,
) -> list[list[float]]:
    """Average F1 over datasets for each (lambda, tau); rows follow ``lambdas``."""
    grid = []
    for lam in lambdas:
        row = []
        for tau in taus:
            row.append(mean(method_scores(s, lam, tau)["trustmargin"][0]
                            for s in scored_by_dataset.values()))
        grid.append(row)
    return grid


def best_cell(grid: Sequence[Sequence[float]], lambdas: Sequence[float],
              taus: Sequence[float]) -> tuple[int, int]:
    """Row/column of the best grid cell; ties go to the cell nearest the default setting."""
    def distance(i: int, j: int) -> float:
        return abs(lambdas[i] - DEFAULT_LAMBDA) + abs(taus[j] - DEFAULT_TAU)

    cells = [(i, j) for i in range(len(lambdas)) for j in range(len(taus))]
    return max(cells, key=lambda ij: (round(grid[ij[0]][ij[1]], 9), -distance(*ij)))


@dataclass(frozen=True)
class NoiseLevel:
    """Outcome of one corruption level over the noise subset."""

    n_replaced: int
    n: int
    n_disagree: int
    rag_selection_rate: float | None  # on disagreements (answers differ after normalization)
    f1_direct: float
    f1_rag: float
    f1_trustmargin: float


def noise_summary(
    noise: Sequence[NoiseRecord], lambda_bind: float = DEFAULT_LAMBDA, tau: float = DEFAULT_TAU
) -> list[NoiseLevel]:
    """Per corruption level: RAG-selection rate and F1 of Direct, RAG and TrustMargin."""
    levels = sorted({n.n_replaced for n in noise})
    out = []
    for level in levels:
        items = [n for n in noise if n.n_replaced == level]
        scored = [score_decision(n.decision, n.example.answers) for n in items]
        disagree = [s for s in scored if s.decision.reason != "answers_agree"]
        picks = [replay(s.decision, lambda_bind=lambda_bind, tau=tau) for s in disagree]
        table = method_scores(scored, lambda_bind, tau)
        out.append(NoiseLevel(
            n_replaced=level, n=len(items), n_disagree=len(disagree),
            rag_selection_rate=100.0 * picks.count("rag") / len(picks) if picks else None,
            f1_direct=table["direct"][0], f1_rag=table["rag"][0],
            f1_trustmargin=table["trustmargin"][0]))
    return out


@dataclass(frozen=True)
class Latency:
    """Mean (and median) seconds per query on this machine, from the cached timings."""

    direct_s: float
    rag_s: float
    trustmargin_s: float
    scoring_s: float
    median_trustmargin_s: float
    n: int

    @property
    def relative_to_direct_plus_rag(self) -> float:
        """TrustMargin's cost divided by the cost of producing both candidates."""
        both = self.direct_s + self.rag_s
        return self.trustmargin_s / both if both > 0 else float("nan")


def latency(records: Sequence[EvalRecord]) -> Latency:
    """Per-query latency of Direct, BM25-RAG (retrieval + generation) and TrustMargin.

    Timings are per-question shares of batched model calls, measured while the run happened
    (only records computed in that run carry real timings; cached ones keep theirs).
    """
    if not records:
        raise InvalidInputError("records", "is empty", "evaluate at least one example")
    direct = [r.decision.timings.generate_direct_s for r in records]
    rag = [r.retrieval_s + r.decision.timings.generate_rag_s for r in records]
    tm = [r.retrieval_s + r.decision.timings.total_s for r in records]
    scoring = [r.decision.timings.scoring_s for r in records]
    return Latency(mean(direct), mean(rag), mean(tm), mean(scoring), median(tm), len(records))
