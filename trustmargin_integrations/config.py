"""Run-time settings of the arbiter (paper defaults)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PAPER_LAMBDA_BIND: float = 0.5
"""The paper's weight of the evidence-binding margin (Section 4.3): the one place it is typed."""
PAPER_TAU: float = -1.5
"""The paper's decision threshold (Section 4.3): RAG is chosen iff M > tau."""


class TrustMarginConfig(BaseModel):
    """Hyper-parameters and limits of TrustMargin.

    Defaults are the paper's main setting (Section 4.3): ``lambda_bind=0.5``, ``tau=-1.5``,
    top-20 passages, a 2048-token context and at most 20 new tokens per answer.
    """

    # NaN would make every comparison with tau false (all Direct): refuse it up front.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    lambda_bind: float = Field(PAPER_LAMBDA_BIND,
                               description="Weight of the evidence-binding margin.")
    tau: float = Field(PAPER_TAU, description="Threshold: RAG is chosen iff M > tau.")
    top_k: int = Field(20, ge=1, description="Passages retrieved per question by "
                                             "TrustMargin.answer when no k is given.")
    max_context_tokens: int = Field(
        2048, ge=16, le=10_000_000,
        description="Token budget of the concatenated passage context (capped further to "
                    "what fits the model's window)."
    )
    max_new_tokens: int = Field(20, ge=1, le=512, description="Greedy generation length.")
    clean_answers: bool = Field(
        True, description="Cut every candidate, generated or given, to its short-answer form "
                          "(first line, no 'Answer:' label, quotes or final period); a given "
                          "candidate that changes is reported in the Decision's warnings.")
    skip_scoring_when_agree: bool = Field(
        True, description="Skip the six likelihoods when both answers normalize equal."
    )
    include_prompts: bool = Field(
        False, description="Attach the exact rendered prompt of each view to the Decision."
    )
    batch_size: int = Field(8, ge=1, description="Questions per model call.")
