"""Run-time settings of the arbiter (paper defaults).

The bounds of the rule's numbers (``Tau``, ``LambdaBind``, ``check_rule_value``) are defined
in :mod:`~trustmargin_integrations.vocabulary`, below the records; import them from there."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trustmargin_integrations.errors import invalid_input, typed_error
from trustmargin_integrations.rule import PAPER_LAMBDA_BIND, PAPER_TAU, Policy, PolicyName
from trustmargin_integrations.vocabulary import RULE_VALUE_FIX, LambdaBind, Tau

__all__ = ["CHAT_MAX_NEW_TOKENS", "CHAT_MAX_NEW_TOKENS_LIMIT", "DEFAULT_SCORING_FORM",
           "ScoringForm", "TrustMarginConfig"]

CHAT_MAX_NEW_TOKENS: int = 256
"""New tokens per answer of the LLM wrappers (LangChain ``LocalLLM`` / ``LocalChatModel``,
LlamaIndex ``LocalLlamaIndexLLM``) unless set: they answer a user's prompt in full, a few chat
paragraphs. The arbiter's own candidates are the paper's short answers instead
(``TrustMarginConfig.max_new_tokens``, 20, stopped after their first line)."""
CHAT_MAX_NEW_TOKENS_LIMIT: int = 8192
"""The most new tokens a wrapper may be asked for (the embedded model's whole window)."""

ScoringForm = Literal["auto", "differential", "extract", "paper"]
"""How a candidate a user's chain produced is to be compared: the setting
(``TrustMarginConfig.scoring_form``). What one decision did compare is recorded as a
:data:`~trustmargin_integrations.schema.CompareForm`, which has more values (a generated
candidate is always compared whole, ``"paper"`` or ``"whole"``)."""


DEFAULT_SCORING_FORM: ScoringForm = "auto"
"""The scoring form of given texts unless one is named (``TrustMarginConfig.scoring_form``)."""

class TrustMarginConfig(BaseModel):
    """Hyper-parameters and limits of TrustMargin.

    Defaults are the paper's main setting (Section 4.3): ``lambda_bind=0.5``, ``tau=-1.5``,
    top-20 passages, a 2048-token context and at most 20 new tokens per answer.
    """

    # NaN would make every comparison with tau false (all Direct): refuse it up front.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    lambda_bind: LambdaBind = PAPER_LAMBDA_BIND
    tau: Tau = PAPER_TAU
    policy: PolicyName = Field(
        "rule", description="Who decides a scored question: 'rule' (M > tau, the paper's "
                            "rule with lambda_bind and tau), 'bind_only' (M_bind > tau), "
                            "'prior_only' (M_prior > tau), 'weighted_bind' (lambda_bind * "
                            "M_bind > tau), 'always_rag' or 'always_direct'. "
                            "Questions settled before scoring keep their outcome under every "
                            "policy; the margins are computed and recorded under every policy. "
                            "Chosen per domain by `trustmargin check`.")
    top_k: int = Field(20, ge=1, description="Passages retrieved per question by "
                                             "TrustMargin.answer when no k is given.")
    max_context_tokens: int = Field(
        2048, ge=16, le=10_000_000,
        description="Token budget of the concatenated passage context (capped further to "
                    "what fits the model's window)."
    )
    max_new_tokens: int = Field(
        20, ge=1, le=512, description="Greedy generation length of the arbiter's own "
                                      "candidates (the paper's short answers; the LLM "
                                      "wrappers use CHAT_MAX_NEW_TOKENS, 256).")
    clean_answers: bool = Field(
        True, description="Cut every generated candidate to its short answer by the paper's "
                          "policy (first line, no 'Answer:' label, quotes or final period) "
                          "and compare given texts by scoring_form; False scores every text "
                          "whole as given (agreeing only when the texts read alike).")
    scoring_form: ScoringForm = Field(
        DEFAULT_SCORING_FORM, description="How a candidate a user's chain produced (chat text) is "
        "compared with the other side. Every form agrees only when the two texts read alike "
        "(trustmargin_integrations.reading: every sign, symbol and digit kept). "
        "'differential': the texts are aligned token by token, every place where both say "
        "something different is scored after the text before it, and the one whose "
        "likelihood depends most on the question is kept. 'extract': the model states the "
        "short answer each text gives, checked to occur in it, and the paper's margins score "
        "those (else compared by difference). 'auto' (the default): 'extract' with a local "
        "scorer of 1B parameters or more, 'differential' with a smaller one (whose extractions "
        "were measured unusable) or one of unknown size (a server's: name 'extract' for a "
        "large served model). 'paper': the "
        "texts are the product's own short answers given back, cut and scored whole the "
        "paper's way. Generated candidates are always scored the paper's way. See "
        "trustmargin_integrations.comparison.")
    return_text: Literal["given", "scored"] = Field(
        "given", description="What Decision.answer holds for a given candidate: the text as "
                             "the caller's chain produced it ('given', the default: the user's "
                             "text comes back whole) or its scored short form ('scored'). "
                             "A generated candidate is always its cleaned short answer.")
    skip_scoring_when_agree: bool = Field(
        True, description="Skip the six likelihoods when both answers normalize equal."
    )
    include_prompts: bool = Field(
        False, description="Attach the exact rendered prompt of each view to the Decision."
    )
    batch_size: int = Field(8, ge=1, description="Questions per model call.")

    def __init__(self, **values: Any) -> None:
        """Refuse a bad value with an InvalidInputError naming the field, not a pydantic
        ValidationError (``tau`` and ``lambda_bind``: see
        :data:`~trustmargin_integrations.vocabulary.TAU_LIMIT`)."""
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise invalid_input(exc, RULE_VALUE_FIX if exc.errors()[0]["loc"][:1] in (
                ("tau",), ("lambda_bind",)) else "pass a value of the documented type and "
                "range (see TrustMarginConfig's fields)") from None

    @property
    def decision_policy(self) -> Policy:
        """The policy the rule settings name (``policy`` with the ``lambda_bind`` / ``tau``
        it takes): the arbiter's default policy, which a call may replace."""
        return Policy.from_setting(self.policy, self.lambda_bind, self.tau)

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> TrustMarginConfig:
        """:meth:`BaseModel.model_validate` raising what ``__init__`` raises."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            # pydantic validates through the custom __init__ and wraps its ValueError.
            raise typed_error(exc, RULE_VALUE_FIX) from None
