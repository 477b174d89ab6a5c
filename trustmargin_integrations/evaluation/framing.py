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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import ScoringForm
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
    compared: int = 0
    kept_side: int = 0
    agree: int = 0
    text_blind: float = float("nan")
    """The rate of keeping the bare side that a decision ignoring the texts reaches at the
    same base rates (the bare and framed shares of RAG, independent)."""
    f1: float = float("nan")
    """Mean F1 (0-100) of the framed decisions, each graded on its kept side's bare answer."""
    flips: list[tuple[int, float | None, float | None]] = field(default_factory=list)

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


def decision_f1(decisions: Sequence[Decision], pairs: Sequence[Disagreement]) -> float:
    """Mean F1 (0-100) of decisions on bare or framed copies of ``pairs``, each graded on the
    bare answer of the side it kept (NaN without gold answers)."""
    graded = [token_f1(p.rag if kept_rag(d) else p.direct, list(p.answers))
              for d, p in zip(decisions, pairs, strict=True) if p.answers]
    return 100 * sum(graded) / len(graded) if graded else float("nan")


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
        row = FramingRow(name, f1=decision_f1(decisions, pairs))
        bare_rag = framed_rag = 0
        for i, (b, f) in enumerate(zip(bare, decisions, strict=True)):
            row.agree += f.source == "agree"
            if b.m is None or abs(b.m - b.tau) < NEAR_TIE:
                continue
            row.compared += 1
            bare_rag += kept_rag(b)
            framed_rag += kept_rag(f)
            if kept_rag(f) == kept_rag(b) and f.source != "agree":
                row.kept_side += 1
            else:
                row.flips.append((i, b.m, f.m))
        if row.compared:
            p, q = bare_rag / row.compared, framed_rag / row.compared
            row.text_blind = p * q + (1 - p) * (1 - q)
        rows.append(row)
    return bare, rows


def invariance_table(results: dict[ScoringForm | str, list[FramingRow]],
                     bare_f1: dict[ScoringForm | str, float] | None = None) -> list[str]:
    """Markdown: per framing and scoring form, the share of pairs keeping the bare side next
    to the text-blind rate, the framed 'agree' count and the framed decisions' F1 (the bare
    decisions' F1 in the header when given)."""
    forms = list(results)
    head = []
    for f in forms:
        bare = f" (bare {bare_f1[f]:.1f})" if bare_f1 and f in bare_f1 else ""
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
    totals = []
    for form in forms:
        rows = results[form]
        kept = sum(r.kept_side for r in rows)
        compared = sum(r.compared for r in rows)
        blind = sum(r.text_blind * r.compared for r in rows if r.compared)
        f1 = sum(r.f1 for r in rows) / len(rows)
        totals += [f"**{kept}/{compared} ({100 * kept / max(compared, 1):.1f}%)**",
                   f"{100 * blind / max(compared, 1):.0f}%",
                   str(sum(r.agree for r in rows)), f"{f1:.1f}"]
    lines.append("| all framings | " + " | ".join(totals) + " |")
    return lines


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
