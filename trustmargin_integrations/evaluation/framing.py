"""Framing invariance: does a decision on two chat texts rest on what they say, or on how they
say it?

A strict disagreement (two different short answers to one question) is wrapped in everyday chat
framings, and the framed texts are arbitrated as a chain's texts are. What the two texts say
differently is unchanged, so the decision should be too. Two suites:

* **same framing** on both sides (:data:`FRAMINGS`): a lead-in in one of several languages, a
  chain-of-thought preamble, markdown, a citation, a trailing caveat, the answer restated;
* **different framings** (:data:`MIXED_FRAMINGS`): the closed-book side framed as a chain
  without retrieval writes (a hedge, memory, the answer first) and the RAG side as a chain that
  cites its context ("according to the context", a citation, bold, the answer last).

Per framing, :func:`invariance` counts the framed decisions that keep the bare pair's side (away
from near-ties, where a small shift of the margin may flip a side honestly) next to the rate a
decision that ignores the texts would reach at the same base rates, the framed decisions that
claim agreement (never allowed: the answers differ), and the F1 of the framed decisions next to
the bare decisions' (each graded on the bare answer of the side it kept: the product's value,
not a proxy).

The framings are ours, written for this check; none is a list the product consults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.evaluation.bootstrap import Difference, Interval, paired_bootstrap
from trustmargin_integrations.evaluation.metrics import token_f1
from trustmargin_integrations.rule.replay import kept_rag
from trustmargin_integrations.schema import Decision, Passage

Framing = Callable[[str], str]
FramingPair = tuple[Framing, Framing]
"""How the Direct text and the RAG text are framed."""

FRAMINGS: dict[str, Framing] = {
    "lead-in (en)": lambda a: f"Hello! {a}.",
    "step by step (en)": lambda a: f"Let me think step by step. {a}.",
    "happy to help (en)": lambda a: f"I'm happy to help! The answer is {a}.",
    "lead-in (fr)": lambda a: f"Bien sûr ! La réponse est {a}.",
    "lead-in (de)": lambda a: f"Gerne! Die Antwort lautet: {a}.",
    "lead-in (es)": lambda a: f"¡Claro! La respuesta es {a}.",
    "lead-in (ru)": lambda a: f"Конечно! Ответ: {a}.",
    "lead-in (zh)": lambda a: f"当然！答案是：{a}。",
    "chain of thought": lambda a: (
        "To answer this, I need to recall the relevant fact and check it against what I "
        f"know about the subject. Putting it together, the answer is {a}."),
    "markdown heading + bold": lambda a: f"### Answer\n\n**{a}**",
    "bullet list": lambda a: f"- **Answer:** {a}\n- **Confidence:** high",
    "citation": lambda a: f"According to the sources, the answer is {a} [1].",
    "trailing caveat": lambda a: (
        f"{a}. Please note that this may have changed since my information was last "
        "updated, so it is worth checking an up-to-date source."),
    "restated at the end": lambda a: f"The answer is {a}. So, to sum up: {a}.",
}
"""Framings of a short answer as chat models write them, the same on both sides."""

MIXED_FRAMINGS: dict[str, FramingPair] = {
    "hedge / according to the context": (
        lambda a: f"I believe the answer is {a}, but I am not completely sure.",
        lambda a: f"According to the context, the answer is {a}."),
    "memory / citation": (
        lambda a: f"From what I remember, it is {a}.",
        lambda a: f"Based on the provided passages, it is {a} [1]."),
    "answer first / answer last": (
        lambda a: f"{a} is the answer to your question.",
        lambda a: f"The passages say that the answer is {a}."),
    "plain / markdown": (
        lambda a: f"The answer is {a}.",
        lambda a: f"**Answer:** {a}\n\n*Source: Passage 1*"),
    "caveat / grounded (fr)": (
        lambda a: f"Je pense que c'est {a}, sans certitude.",
        lambda a: f"D'après le contexte, c'est {a}."),
    "bare / cited sentence": (
        lambda a: f"{a}.",
        lambda a: f"The retrieved documents state the answer: {a} (see Passage 0)."),
}
"""A closed-book chain's framing of Direct's answer and a RAG chain's framing of its own."""

NEAR_TIE = 0.25
"""Bare decisions with ``|M - tau|`` below this are near-ties, left out of the rate."""


@dataclass(frozen=True)
class Disagreement:
    """A question, its passages, two different short answers (Direct's, RAG's) and, when
    known, the gold answers (for the F1 of the decisions)."""

    question: str
    passages: Sequence[Passage | str]
    direct: str
    rag: str
    answers: Sequence[str] = ()


@dataclass
class FramingRow:
    """One framing's outcome over the disagreements."""

    framing: str
    agree: int = 0
    text_blind: float = float("nan")
    """The rate of keeping the bare side that a decision ignoring the texts reaches at the
    same base rates (the bare and framed shares of RAG, independent)."""
    pair_f1: list[float] = field(default_factory=list)
    """Per pair with gold answers, in pair order: the framed decision's F1 (0-1)."""
    kept_by_pair: list[bool] = field(default_factory=list)
    """Per compared pair, in pair order: whether the framed decision kept the bare side."""
    flips: list[tuple[int, float | None, float | None]] = field(default_factory=list)

    @property
    def compared(self) -> int:
        """Pairs compared: the bare pairs away from near-ties."""
        return len(self.kept_by_pair)

    @property
    def kept_side(self) -> int:
        """Compared pairs whose framed decision kept the bare side."""
        return sum(self.kept_by_pair)

    @property
    def f1(self) -> float:
        """Mean F1 (0-100) of the framed decisions, each graded on its kept side's bare
        answer (NaN without gold answers)."""
        return 100 * sum(self.pair_f1) / len(self.pair_f1) if self.pair_f1 else float("nan")

    @property
    def rate(self) -> float:
        """Share of compared (non-near-tie) pairs whose framed decision kept the bare side."""
        return self.kept_side / self.compared if self.compared else float("nan")


def arbitrate_pairs(tm: TrustMargin, pairs: Sequence[Disagreement],
                    framings: Sequence[FramingPair | None] = (None,), *,
                    progress: bool = False) -> list[list[Decision]]:
    """Every pair arbitrated as given texts under each framing pair (None: bare), one list of
    decisions per framing (``progress``: a bar over the framed texts). All in one batch: the
    copies of one question share its prompts, so the scorer prefills each passage context
    once for all its framings."""
    items = [{"question": p.question, "passages": list(p.passages),
              "direct_answer": frame[0](p.direct) if frame else p.direct,
              "rag_answer": frame[1](p.rag) if frame else p.rag}
             for frame in framings for p in pairs]
    flat = tm.arbitrate_batch(items, progress=progress)
    return [flat[k * len(pairs):(k + 1) * len(pairs)] for k in range(len(framings))]


def decision_scores(decisions: Sequence[Decision], pairs: Sequence[Disagreement]
                    ) -> list[float]:
    """Per pair with gold answers, the F1 (0-1) of its decision on a bare or framed copy,
    graded on the bare answer of the side it kept."""
    return [token_f1(p.rag if kept_rag(d) else p.direct, list(p.answers))
            for d, p in zip(decisions, pairs, strict=True) if p.answers]


def invariance(tm: TrustMargin, pairs: Sequence[Disagreement],
               framings: dict[str, Framing | FramingPair] | None = None, *,
               progress: bool = False) -> tuple[list[Decision], list[FramingRow]]:
    """The bare decisions and, per framing (one for both sides, or a pair: Direct's and
    RAG's), the rates of :class:`FramingRow` (``progress``: a bar over every arbitration).

    A bare pair that is itself settled (its texts agree or are blank) or a near-tie
    (``|M - tau| < NEAR_TIE``) is not compared; every framed ``agree`` is counted.
    """
    chosen = framings or FRAMINGS
    as_pairs = [f if isinstance(f, tuple) else (f, f) for f in chosen.values()]
    bare, *framed = arbitrate_pairs(tm, pairs, [None, *as_pairs], progress=progress)
    rows = []
    for name, decisions in zip(chosen, framed, strict=True):
        row = FramingRow(name, pair_f1=decision_scores(decisions, pairs))
        bare_rag = framed_rag = 0
        for i, (b, f) in enumerate(zip(bare, decisions, strict=True)):
            row.agree += f.source == "agree"
            if b.m is None or abs(b.m - b.tau) < NEAR_TIE:
                continue
            bare_rag += kept_rag(b)
            framed_rag += kept_rag(f)
            kept = kept_rag(f) == kept_rag(b) and f.source != "agree"
            row.kept_by_pair.append(kept)
            if not kept:
                row.flips.append((i, b.m, f.m))
        if row.compared:
            p, q = bare_rag / row.compared, framed_rag / row.compared
            row.text_blind = p * q + (1 - p) * (1 - q)
        rows.append(row)
    return bare, rows


@dataclass(frozen=True)
class SuiteSummary:
    """A suite of framings over the same pairs, with paired bootstrap intervals over the pairs
    (the unit that was sampled: one pair's framings are not independent)."""

    kept: int
    compared: int
    rate: Interval | None
    """Share (x100) of framed decisions keeping the bare side, away from near-ties (None:
    every pair was a near-tie)."""
    text_blind: float
    """The rate (0-1) a decision ignoring the texts reaches at the same base rates."""
    agree: int
    f1: Interval | None
    """The framed decisions' F1, averaged over the framings (None: no gold answers)."""
    f1_vs_bare: Difference | None
    """Framed F1 minus the bare decisions' F1 on the same pairs."""
    note: str
    """How the intervals were made, with the small-sample warning when due."""


def suite_summary(rows: Sequence[FramingRow], bare_scores: Sequence[float], *,
                  seed: int = 0) -> SuiteSummary:
    """The rate of keeping the bare side and the framed F1 against the bare F1 over a suite of
    framings (``bare_scores``: :func:`decision_scores` of the bare decisions), each with its
    paired bootstrap interval over the pairs."""
    compared = sum(r.compared for r in rows)
    kept_share = [sum(r.kept_by_pair[k] for r in rows) / len(rows)
                  for k in range(len(rows[0].kept_by_pair))]
    framed = [sum(r.pair_f1[k] for r in rows) / len(rows) for k in range(len(bare_scores))]
    # Two bootstraps: the rate counts compared pairs only, the F1 every pair with gold.
    rate = (paired_bootstrap({"kept": kept_share}, seed=seed).methods["kept"]
            if kept_share else None)
    f1 = (paired_bootstrap({"framed": framed, "bare": list(bare_scores)},
                           [("framed", "bare")], seed=seed) if framed else None)
    blind = sum(r.text_blind * r.compared for r in rows if r.compared) / max(compared, 1)
    return SuiteSummary(sum(r.kept_side for r in rows), compared, rate, blind,
                        sum(r.agree for r in rows), f1.methods["framed"] if f1 else None,
                        f1.differences["framed - bare"] if f1 else None,
                        f1.note() if f1 else "no gold answers: no F1")


def invariance_table(results: Mapping[str, list[FramingRow]],
                     bare_scores: Mapping[str, Sequence[float]]) -> list[str]:
    """Markdown: per framing and scoring form, the share of pairs keeping the bare side next
    to the text-blind rate, the framed 'agree' count and the framed decisions' F1 (the bare
    decisions' F1 in the header; ``bare_scores``: per form, :func:`decision_scores` of the
    bare decisions); the suite's row carries the paired intervals of :func:`suite_summary`."""
    forms = list(results)
    head = []
    for f in forms:
        scores = bare_scores[f]
        bare = f" (bare {100 * sum(scores) / len(scores):.1f})" if scores else ""
        head.append(f"{f}: same side | text-blind | agree | F1{bare}")
    lines = ["| framing | " + " | ".join(head) + " |",
             "|---|" + "---|---|---|---|" * len(forms)]
    names = [row.framing for row in next(iter(results.values()))]
    for k, name in enumerate(names):
        cells = []
        for form in forms:
            row = results[form][k]
            cells += [f"{row.kept_side}/{row.compared} ({100 * row.rate:.0f}%)",
                      f"{100 * row.text_blind:.0f}%", str(row.agree), f"{row.f1:.1f}"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals, notes = [], []
    for form in forms:
        s = suite_summary(results[form], bare_scores[form])
        rate = s.rate.ci(1) if s.rate else ""
        f1 = (f"{s.f1.mean:.1f}; {s.f1_vs_bare.mean:+.1f} {s.f1_vs_bare.ci(1)} vs bare"
              if s.f1 and s.f1_vs_bare else "n/a")
        totals += [f"**{s.kept}/{s.compared} ({100 * s.kept / max(s.compared, 1):.1f}%)** "
                   f"{rate}", f"{100 * s.text_blind:.0f}%", str(s.agree), f1]
        notes.append(s.note)
    lines.append("| all framings | " + " | ".join(totals) + " |")
    return [*lines, "", "All framings: per pair, the share of its framings that kept the bare "
            "side and its framed F1 averaged over the framings; " + notes[0]]


def disagreements(tm: TrustMargin,
                  questions: Sequence[tuple[str, Sequence[Passage | str]]
                                      | tuple[str, Sequence[Passage | str], Sequence[str]]],
                  *, progress: bool = False) -> list[Disagreement]:
    """The strict disagreements among ``questions`` (question, passages and optionally the
    gold answers): the model answers each both ways under the paper's prompts, and the pairs
    whose short answers differ (neither blank) are kept."""
    decisions = tm.arbitrate_batch([{"question": q[0], "passages": list(q[1])}
                                    for q in questions], progress=progress)
    return [Disagreement(q[0], list(q[1]), d.direct_answer, d.rag_answer,
                         list(q[2]) if len(q) > 2 else [])
            for q, d in zip(questions, decisions, strict=True)
            if d.m is not None and d.source != "agree"]
