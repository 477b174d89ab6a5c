"""What a chain returns from a Decision: the chosen side's full text, or a readable summary."""

from __future__ import annotations

from typing import Any, Literal

from trustmargin_integrations.schema import Decision

__all__ = ["DECISION_EVENT", "Output", "chosen_text",
           "decision_payload", "describe_decision", "shape_output"]

Output = Literal["answer", "decision"]
"""What a TrustMargin chain or router returns: the chosen answer text, or the Decision."""

DECISION_EVENT = "trustmargin_decision"
"""Name of the custom callback event a drop-in chain emits with the whole Decision (JSON)."""


def chosen_text(decision: Decision) -> str:
    """The chosen side's text as the user's chain produced it: ``Decision.answer``, which the
    core fills with a given candidate's whole text (``TrustMarginConfig.return_text``)."""
    return decision.answer


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
