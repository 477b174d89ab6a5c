"""Framing invariance: does a decision on two chat texts rest on what they say, or on how they
say it?

A strict disagreement (two different short answers to one question) is wrapped on both sides
in the same everyday chat framing: a lead-in in one of several languages, a chain-of-thought
preamble, markdown, a citation, a trailing caveat, the answer restated. What the two texts say
differently is unchanged, so the decision should be too. :func:`invariance` arbitrates the bare
pairs and every framed copy under one scoring form and counts, per framing, the framed
decisions that keep the bare pair's side (away from near-ties, where a small shift of the
margin may flip a side honestly) and those that claim agreement (never allowed: the answers
differ).

The framings are ours, written for this check; none is a list the product consults.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import ScoringForm
from trustmargin_integrations.schema import Decision, Passage

Framing = Callable[[str], str]

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
"""Framings of a short answer as chat models write them (lead-ins in six languages)."""

NEAR_TIE = 0.25
"""Bare decisions with ``|M - tau|`` below this are near-ties, left out of the rate."""


@dataclass(frozen=True)
class Disagreement:
    """A question, its passages and two different short answers (Direct's, RAG's)."""

    question: str
    passages: Sequence[Passage | str]
    direct: str
    rag: str


@dataclass
class FramingRow:
    """One framing's outcome over the disagreements."""

    framing: str
    compared: int = 0
    kept_side: int = 0
    agree: int = 0
    flips: list[tuple[int, float | None, float | None]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Share of compared (non-near-tie) pairs whose framed decision kept the bare side."""
        return self.kept_side / self.compared if self.compared else float("nan")


def arbitrate_pairs(tm: TrustMargin, pairs: Sequence[Disagreement],
                    framings: Sequence[Framing | None] = (None,), *, progress: bool = False
                    ) -> list[list[Decision]]:
    """Every pair arbitrated as given texts under each framing (None: bare), one list of
    decisions per framing (``progress``: a bar over the framed texts). All in one batch: the
    copies of one question share its prompts, so the scorer prefills each passage context
    once for all its framings."""
    items = [{"question": p.question, "passages": list(p.passages),
              "direct_answer": frame(p.direct) if frame else p.direct,
              "rag_answer": frame(p.rag) if frame else p.rag}
             for frame in framings for p in pairs]
    flat = tm.arbitrate_batch(items, progress=progress)
    return [flat[k * len(pairs):(k + 1) * len(pairs)] for k in range(len(framings))]


def invariance(tm: TrustMargin, pairs: Sequence[Disagreement],
               framings: dict[str, Framing] | None = None, *, progress: bool = False
               ) -> tuple[list[Decision], list[FramingRow]]:
    """The bare decisions and, per framing, how many framed decisions keep the bare side
    (``progress``: a bar over every framed arbitration).

    A bare pair that is itself settled (its texts agree or are blank) or a near-tie
    (``|M - tau| < NEAR_TIE``) is not compared; every framed ``agree`` is counted.
    """
    chosen = framings or FRAMINGS
    bare, *framed = arbitrate_pairs(tm, pairs, [None, *chosen.values()], progress=progress)
    rows = []
    for name, decisions in zip(chosen, framed, strict=True):
        row = FramingRow(name)
        for i, (b, f) in enumerate(zip(bare, decisions, strict=True)):
            row.agree += f.source == "agree"
            if b.m is None or abs(b.m - b.tau) < NEAR_TIE:
                continue
            row.compared += 1
            if f.source == b.source:
                row.kept_side += 1
            else:
                row.flips.append((i, b.m, f.m))
        rows.append(row)
    return bare, rows


def invariance_table(results: dict[ScoringForm | str, list[FramingRow]]) -> list[str]:
    """Markdown: per framing, the share of pairs keeping the bare side and the framed
    'agree' count, one column per scoring form."""
    forms = list(results)
    lines = ["| framing | " + " | ".join(f"{f}: same side | {f}: agree" for f in forms) + " |",
             "|---|" + "---|---|" * len(forms)]
    names = [row.framing for row in next(iter(results.values()))]
    for k, name in enumerate(names):
        cells = []
        for form in forms:
            row = results[form][k]
            cells += [f"{row.kept_side}/{row.compared} ({100 * row.rate:.0f}%)", str(row.agree)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    totals = []
    for form in forms:
        kept = sum(r.kept_side for r in results[form])
        compared = sum(r.compared for r in results[form])
        agree = sum(r.agree for r in results[form])
        totals += [f"**{kept}/{compared} ({100 * kept / max(compared, 1):.1f}%)**", str(agree)]
    lines.append("| all framings | " + " | ".join(totals) + " |")
    return lines


def disagreements(tm: TrustMargin, questions: Sequence[tuple[str, Sequence[Passage | str]]],
                  *, progress: bool = False) -> list[Disagreement]:
    """The strict disagreements among ``questions``: the model answers each both ways under
    the paper's prompts, and the pairs whose short answers differ (neither blank) are kept."""
    decisions = tm.arbitrate_batch([{"question": q, "passages": list(p)} for q, p in questions],
                                   progress=progress)
    return [Disagreement(q, list(p), d.direct_answer, d.rag_answer)
            for (q, p), d in zip(questions, decisions, strict=True)
            if d.m is not None and d.source != "agree"]
