"""What a chain returns from a Decision: the chosen side's full text, or a readable summary."""

from __future__ import annotations

from typing import Any, Literal

from trustmargin_integrations.schema import Decision

Output = Literal["answer", "decision"]
"""What a TrustMargin chain or router returns: the chosen answer text, or the Decision."""

DECISION_EVENT = "trustmargin_decision"
"""Name of the custom callback event a drop-in chain emits with the whole Decision (JSON)."""


def chosen_text(decision: Decision) -> str:
    """The chosen side's full text as the user's chain produced it.

    The core keeps a side's text before answer cleaning in ``*_raw`` only when cleaning
    changed it, so the full text is ``raw or answer`` of the kept side. The core is adding
    this text to the Decision itself; at merge this is the one place to switch to that field.
    """
    if decision.winner is not None:
        kept = decision.rag_candidates[decision.winner]
        return kept.raw or kept.answer
    # "agree": the two sides normalize equal; the Decision's answer is the side the rule kept.
    rag = decision.source == "rag" or (decision.source == "agree"
                                       and decision.answer == decision.rag_answer)
    if rag:
        return decision.rag_raw or decision.rag_answer
    return decision.direct_raw or decision.direct_answer


def describe_decision(decision: Decision) -> str:
    """The answer followed by one line on how it was chosen (a tool's readable output)."""
    side = {"rag": "retrieval-augmented", "direct": "closed-book",
            "agree": "agreed"}[decision.source]
    margin = ("" if decision.m is None
              else f", M = {decision.m:.3f} vs tau = {decision.tau:g}")
    return (f"{chosen_text(decision)}\n\n(TrustMargin kept the {side} answer; reason: "
            f"{decision.reason}{margin})")


def shape_output(decision: Decision, output: Output) -> Decision | str:
    """``decision`` as asked: the chosen full text (``"answer"``) or the Decision itself."""
    return chosen_text(decision) if output == "answer" else decision


def decision_payload(decision: Decision) -> dict[str, Any]:
    """The Decision as JSON data, for custom events and run metadata."""
    return decision.model_dump(mode="json")
