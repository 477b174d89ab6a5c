"""Pydantic records: passages, the three prompt views and the Decision (the audit record).

Records only: no import of the rule or the config, so a retriever returns ``Passage`` records
without loading a decision policy. Every number is finite (``allow_inf_nan=False``; why:
docs/decisions.md). The input of one arbitration is ``validation.ArbitrationInput``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trustmargin_integrations.vocabulary import LambdaBind, Reason, Side, Source, Tau

CompareForm = Literal["paper", "differential", "extract", "whole", "sentence"]
"""What a decision compared (``Decision.scoring_form``)."""


class Passage(BaseModel):
    """A retrieved passage: what every retriever in this package returns."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str = Field(description="Stable identifier within its corpus.")
    text: str
    title: str = ""
    score: float | None = Field(None, description="Retriever score (BM25), when known.")
    metadata: dict[str, str | int | float | bool | None] = Field(default_factory=dict)

    def as_context(self) -> str:
        """The passage as it enters the prompt: ``title: text`` when a title exists.

        Every entry point (core, LangChain documents, LlamaIndex nodes) formats passages
        through this method, so the same evidence always yields the same prompt.
        """
        return f"{self.title}: {self.text}" if self.title else self.text


class PassageRef(BaseModel):
    """Which passage entered the context: its rank, id, title and retriever score."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rank: int = Field(ge=0, description="Position in the retrieval order (0 = best).")
    id: str | None = Field(None, description="The passage id (None for a bare string).")
    title: str = ""
    score: float | None = Field(None, description="Retriever score, when known.")


class ViewLikelihoods(BaseModel):
    """One candidate's length-normalized log-likelihoods under the three views."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    question_only: float = Field(description="l_D(y) = log p(y | q) / |y|")
    question_context: float = Field(description="l_R(y) = log p(y | q, P) / |y|")
    context_only: float = Field(description="l_C(y) = log p(y | P) / |y|")
    num_tokens: int = Field(ge=1, description="|y|: answer length in tokens.")


class ViewPrompts(BaseModel):
    """One string per prompt view: the filled templates, or the exact rendered prompts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question_only: str = Field(description="question-only view (closed-book)")
    question_context: str = Field(description="question + passages view (RAG)")
    context_only: str = Field(description="passages-only view (question removed)")


def _zero(value: float) -> bool:
    return value == 0.0


def _empty(value: list[Any]) -> bool:
    return not value


def _none(value: object) -> bool:
    return value is None


def _the_rule(value: object) -> bool:
    return value == "rule"


def _paper(value: object) -> bool:
    return value == "paper"


class Timings(BaseModel):
    """Wall-clock seconds spent on this question (a batch's time is split evenly)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    generate_direct_s: float = 0.0
    generate_rag_s: float = 0.0
    comparing_s: float = Field(
        0.0, exclude_if=_zero,
        description="Finding what is compared in a chain's answers (the extraction "
                    "generations under scoring_form='extract'; text alignment otherwise).")
    scoring_s: float = 0.0
    total_s: float = 0.0


class RagCandidate(BaseModel):
    """One RAG-side candidate of a multi-candidate decision: its text, likelihoods, margins."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str | None = Field(
        None, description="The caller's label (e.g. 'bm25', 'ircot'); None for a bare text.")
    answer: str = Field(description="The text as scored (after answer cleaning).")
    raw: str | None = Field(
        None, description="The text before answer cleaning, when cleaning changed it.")
    agrees_with_direct: bool = Field(
        False, description="States what the Direct answer states (generated short answers: "
                           "equal after SQuAD normalization; a chain's texts: every word equal "
                           "after it, or equal stated short answers under 'extract').")
    direct_compared: str | None = Field(
        None, exclude_if=_none,
        description="The part of the Direct text compared with this candidate, when a chain's "
                    "texts are compared pair by pair (it may differ from candidate to "
                    "candidate).")
    likelihoods: ViewLikelihoods | None = Field(
        None, description="Its three-view likelihoods; None when it was not scored.")
    m_prior: float | None = Field(None, description="M_prior of this candidate over Direct.")
    m_bind: float | None = Field(None, description="M_bind of this candidate over Direct.")
    m: float | None = Field(
        None, description="M at the decision's lambda_bind. Margins are 0 without "
                          "likelihoods for an unscored candidate equal to Direct (identical "
                          "answers' margins), None for one that cannot win (blank) or when "
                          "the decision was settled before scoring.")


class Decision(BaseModel):
    """The arbitration outcome and its full audit trail.

    ``answer`` is the chosen text as it is returned: a given candidate exactly as the caller's
    chain produced it (``TrustMarginConfig.return_text="given"``, the default), a generated one
    as its cleaned short answer; ``direct_answer`` / ``rag_answer`` are the short forms that
    were scored (and ``direct_raw`` / ``rag_raw`` the texts, when they differ); ``source``
    says where the answer came from. The six
    log-likelihoods, both margins and the hyper-parameters in force are kept so the
    decision can be replayed or recomputed independently.

    With several RAG candidates (``rag_candidates``), every candidate is recorded with its
    likelihoods and margins and ``winner`` is the index of the kept one (None: Direct kept).
    The pairwise fields ``rag_answer``, ``rag_raw``, ``rag_likelihoods``, ``m_prior``,
    ``m_bind`` and ``m`` then describe the winner, or, when Direct is kept, the candidate
    with the largest margin (the first non-blank one when the decision was settled before
    scoring), so consumers of pairwise decisions keep working; ``rag_generated`` is False.
    Both new fields are left out of the JSON of a pairwise decision, which is unchanged.

    Under a policy other than the margin rule (``TrustMarginConfig.policy``), ``policy`` names
    it and ``paper_choice`` (``paper_winner``) records what the paper's rule (0.5, -1.5)
    would have kept; the margins are recorded all the same. Under the rule these fields are
    left out of the JSON, so decisions and caches made before policies are unchanged.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    id: str | None = None
    question: str
    answer: str
    source: Source
    reason: Reason
    direct_answer: str
    rag_answer: str
    direct_generated: bool = Field(description="True when the Direct answer was generated here.")
    rag_generated: bool = Field(description="True when the RAG answer was generated here.")
    direct_raw: str | None = Field(
        None, description="The Direct text before answer cleaning, when cleaning changed it.")
    rag_raw: str | None = Field(
        None, description="The RAG text before answer cleaning, when cleaning changed it.")
    direct_likelihoods: ViewLikelihoods | None = None
    rag_likelihoods: ViewLikelihoods | None = None
    scoring_form: CompareForm = Field(
        "paper", exclude_if=_paper,
        description="What was compared: 'paper' (short answers, the paper's scoring), "
                    "'differential' (the place where two chain texts say different things "
                    "that depends most on the question, see direct_spans/rag_spans), "
                    "'extract' (the short answers the model read in the texts), 'whole' "
                    "(texts as given, clean_answers=False) or, in records written by "
                    "earlier versions, 'sentence' (the answering sentence).")
    direct_spans: list[tuple[int, int]] | None = Field(
        None, exclude_if=_none,
        description="Character spans [start, end) of the Direct text (direct_raw, else "
                    "direct_answer's text as given) that were scored, under 'differential'.")
    rag_spans: list[tuple[int, int]] | None = Field(
        None, exclude_if=_none,
        description="Character spans of the RAG text that were scored, under 'differential'.")
    m_prior: float | None = None
    m_bind: float | None = None
    m: float | None = None
    lambda_bind: LambdaBind
    tau: Tau
    passages_given: int
    passages_used: int
    passages: list[PassageRef] = Field(
        default_factory=list, description="The passages that entered the context, in order.")
    context_tokens: int
    context_truncated: bool
    model_id: str
    prompt_version: str
    timings: Timings = Field(default_factory=Timings)
    warnings: list[str] = Field(
        default_factory=list, description="Every change made to the input, e.g. a cut context."
    )
    prompts: ViewPrompts | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="The caller's data from the input, untouched.")
    rag_candidates: list[RagCandidate] = Field(
        default_factory=list, exclude_if=_empty,
        description="Every RAG-side candidate of a multi-candidate decision, in the caller's "
                    "order (empty for a pairwise decision).")
    winner: int | None = Field(
        None, ge=0, exclude_if=_none,
        description="Index in rag_candidates of the kept candidate; None when Direct is kept "
                    "or the decision is pairwise.")

    # A name, not checked against the rule's registry: the records never import the rule,
    # and an audit record stays readable after a policy is renamed (replay maps old names
    # and refuses an unknown one, rule.replay).
    policy: str = Field(
        "rule", exclude_if=_the_rule, pattern=r"^[a-z][a-z0-9_]*$",
        description="Who decided a scored question: the name of the policy "
                    "(TrustMarginConfig.policy: 'rule', 'bind_only', 'prior_only', "
                    "'weighted_bind', 'always_rag' or 'always_direct').")
    paper_choice: Side | None = Field(
        None, exclude_if=_none,
        description="The side the paper's rule (lambda 0.5, tau -1.5) would have kept; set "
                    "when another policy decided (the audit of a fallback policy).")
    paper_winner: int | None = Field(
        None, ge=0, exclude_if=_none,
        description="Index in rag_candidates of the candidate the paper's rule would have "
                    "kept (multi-candidate decisions under another policy).")

    @model_validator(mode="after")
    def _winner_is_a_candidate(self) -> Decision:
        if self.winner is not None and self.winner >= len(self.rag_candidates):
            raise ValueError(f"winner {self.winner} is not an index of rag_candidates "
                             f"({len(self.rag_candidates)} candidates)")
        return self

    @property
    def candidates(self) -> list[RagCandidate]:
        """Every RAG-side candidate as one list, read-only (a view, not a stored field): the
        ``rag_candidates`` of a multi-candidate decision, else the one RAG answer of a
        pairwise decision as a :class:`RagCandidate` made of its pairwise fields. The stored
        JSON of either kind is unchanged."""
        if self.rag_candidates:
            return list(self.rag_candidates)
        return [RagCandidate(answer=self.rag_answer, raw=self.rag_raw,
                             agrees_with_direct=self.source == "agree",
                             likelihoods=self.rag_likelihoods, m_prior=self.m_prior,
                             m_bind=self.m_bind, m=self.m)]

    def given_text(self, side: Side) -> str:
        """One side's whole text: the Direct (``"direct"``) or the shown RAG candidate's
        (``"rag"``) text as given, whatever part of it was compared (see
        :func:`given_text`)."""
        if side == "direct":
            return given_text(self.direct_raw, self.direct_answer)
        return given_text(self.rag_raw, self.rag_answer)


def given_text(raw: str | None, text: str) -> str:
    """A candidate's whole text as given, from what a record keeps of it: ``raw`` (kept only
    when it differs from ``text``, the cleaned or compared part), else ``text``, which is
    then the whole text.

    The one rule for the text a decision returns for a given candidate
    (``arbiter.decision.returned_text``) and the text graded as a chain's answer
    (``evaluation.diagnostics.score_decision``).
    """
    return raw.strip() if raw is not None else text
