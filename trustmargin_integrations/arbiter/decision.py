"""Decision assembly: the config's policy applied to a scored question's margins
(:func:`~trustmargin_integrations.rule.apply_policy`, the paper's rule by default), then the
audit record (:class:`~trustmargin_integrations.schema.Decision`) with everything that led to
it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trustmargin_integrations.arbiter.candidates import Candidate
from trustmargin_integrations.arbiter.comparisons import Compared
from trustmargin_integrations.arbiter.plan import Plan
from trustmargin_integrations.arbiter.preparation import PreparedQuestion
from trustmargin_integrations.comparison import Span
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.rule import (
    Margins,
    Policy,
    Verdict,
    apply_policy,
    compute_margins,
)
from trustmargin_integrations.schema import (
    Decision,
    RagCandidate,
    Timings,
    ViewLikelihoods,
    given_text,
)
from trustmargin_integrations.validation import check_items


@dataclass(frozen=True)
class Evidence:
    """What scoring one question leaves for a policy to decide on: its candidates and their
    comparison with Direct, the plan (settled, or which candidates were scored), the six
    likelihoods per scored pair (Direct's then each scored candidate's; None when settled)
    and the provenance (model, timings, prompts). No field depends on a policy:
    :func:`assemble_decision` turns it into a Decision under any policy, without the model;
    except for a question arbitrated under a policy that keeps one side whatever the margins
    (``plan.fixed``), which has no likelihoods and is decided under that policy only.
    """

    prepared: PreparedQuestion
    direct: Candidate
    options: list[Candidate]
    compared: list[Compared]
    plan: Plan
    scores: list[ViewLikelihoods] | None
    timings: Timings
    model_id: str
    keep_prompts: bool

    @property
    def warnings(self) -> list[str]:
        """Every warning about this question, each once, in the order the stages made them:
        validation's and preparation's (:class:`PreparedQuestion`), then the candidates'
        and the comparisons' (each stage returns its own; none is appended in place)."""
        notes = [self.direct.note, *(o.note for o in self.options),
                 *(c.note for c in self.compared), self.plan.note]
        found = [*self.prepared.warnings, *(n for n in notes if n is not None)]
        return list(dict.fromkeys(found))


@dataclass
class _Outcome:
    """A question's verdict with the likelihoods and margins behind it (None where an
    answer was not scored), and what the paper's rule keeps (the audit of other policies)."""

    verdict: Verdict
    paper: Verdict | None
    """What the paper's rule keeps; None when nothing was scored (``Plan.fixed``)."""
    direct_likelihoods: list[ViewLikelihoods | None]
    """Direct's likelihoods in each candidate's pair (None where not scored)."""
    likelihoods: list[ViewLikelihoods | None]
    margins: list[Margins | None]


def _outcome(plan: Plan, scores: list[ViewLikelihoods] | None, n_options: int,
             policy: Policy, lambda_bind: float) -> _Outcome:
    """The settled verdict, or ``policy`` over the scored candidates' margins (each
    candidate's ``M`` recorded at ``lambda_bind``).

    A settled question keeps its outcome under every policy, single sources included
    (``apply_policy`` is not asked): there the RAG answer is blank or absent (no passage
    entered the context), or Direct is blank, or both answers agree, so always-RAG or
    always-Direct could only return a blank answer or one that does not exist.
    """
    likelihoods: list[ViewLikelihoods | None] = [None] * n_options
    margins: list[Margins | None] = [None] * n_options
    if plan.verdict is not None:
        return _Outcome(plan.verdict, plan.verdict, [None] * n_options, likelihoods, margins)
    if plan.fixed is not None:
        if policy.unscored(n_options) != plan.fixed:
            raise InvalidInputError(
                "policy", f"the question was not scored (its policy kept one side: "
                f"{plan.fixed.reason}), and {policy.label} needs its margins",
                "decide it under the policy it was arbitrated by, or score it with "
                "score_batch (which scores every question) and decide that")
        return _Outcome(plan.fixed, None, [None] * n_options, likelihoods, margins)
    scores = _checked_scores(scores, plan)
    direct_of: list[ViewLikelihoods | None] = [None] * n_options
    for j in plan.scored:
        d, r = plan.pairs[j]
        direct_of[j], likelihoods[j] = scores[d], scores[r]
        margins[j] = compute_margins(scores[d], scores[r], lambda_bind)
    for j, earlier in plan.copies.items():
        direct_of[j] = direct_of[earlier]
        likelihoods[j], margins[j] = likelihoods[earlier], margins[earlier]
    for j in plan.agreeing:
        # Equal to Direct: the margins of identical answers, without scoring.
        margins[j] = Margins(0.0, 0.0, 0.0)
    decided = apply_policy(policy, margins)
    return _Outcome(decided.rule, decided.paper, direct_of, likelihoods, margins)


def _checked_scores(scores: list[ViewLikelihoods] | None, plan: Plan
                    ) -> list[ViewLikelihoods]:
    """The likelihoods of an unsettled question, when they hold every scored pair's; else an
    InvalidInputError on ``evidence.scores`` (an Evidence built by hand, ``scores=None``)."""
    fix = "pass the Evidence score_batch returned, unchanged"
    checked = check_items(scores, "evidence.scores", ViewLikelihoods, what="likelihoods",
                          empty_fix=fix, item_fix=fix)
    needed = 1 + max((i for j in plan.scored for i in plan.pairs[j]), default=-1)
    if len(checked) < needed:
        raise InvalidInputError("evidence.scores", f"holds {len(checked)} likelihoods, the "
                                f"plan scores {needed}", fix)
    return checked


def _candidate_records(options: list[Candidate], compared: list[Compared],
                       outcome: _Outcome) -> list[RagCandidate]:
    """The per-candidate records of a question given ``rag_candidates``."""
    return [
        RagCandidate(name=o.name, answer=pair.rag_text, raw=_raw(o, pair.rag_text),
                     agrees_with_direct=pair.agree,
                     direct_compared=None if pair.form == "paper" else pair.direct_text,
                     likelihoods=outcome.likelihoods[j], **asdict(m) if m is not None else {})
        for j, (o, pair, m) in enumerate(zip(options, compared, outcome.margins, strict=True))
    ]


def _raw(candidate: Candidate, compared_text: str) -> str | None:
    """The candidate's text as given, when what was compared differs from it."""
    if candidate.raw is not None:
        return candidate.raw
    return None if compared_text == candidate.answer else candidate.answer


def returned_text(candidate: Candidate, compared_text: str, config: TrustMarginConfig) -> str:
    """The text a decision returns for its chosen candidate: a given answer as the caller's
    chain produced it (unless ``config.return_text`` is ``"scored"``: then what was
    compared), a generated one as its cleaned short answer (the paper's behaviour)."""
    if candidate.generated:
        return candidate.answer
    if config.return_text == "scored":
        return compared_text
    return given_text(candidate.raw, candidate.answer)


# Long only by the Decision's field list (one keyword per audit field, ~35): kept in one call
# so that where every recorded number comes from is visible in one place.
def assemble_decision(evidence: Evidence, *, config: TrustMarginConfig, policy: Policy
                      ) -> Decision:
    """The Decision of one question from its evidence, decided by ``policy``: the Decision
    records it as the config values that apply it (``policy``, and ``lambda_bind`` / ``tau``
    where it has them, the config's otherwise)."""
    prepared, direct, options, compared = (evidence.prepared, evidence.direct,
                                           evidence.options, evidence.compared)
    plan, scores, timings = evidence.plan, evidence.scores, evidence.timings
    model_id, keep_prompts = evidence.model_id, evidence.keep_prompts
    rule = config.model_copy(update=policy.setting)
    outcome = _outcome(plan, scores, len(options), policy, rule.lambda_bind)
    verdict = outcome.verdict
    # The candidate the pairwise fields describe: the kept or best-margin one, else (a
    # settled verdict keeping Direct) the first non-blank one.
    shown = verdict.candidate
    if shown is None:
        shown = next((j for j, blank in enumerate(plan.blank) if not blank), 0)
    rag, pair = options[shown], compared[shown]
    source = "agree" if pair.agree and verdict.reason != "no_evidence" else verdict.choice
    valid, context = prepared.input, prepared.context
    listed = valid.rag_candidates is not None
    records = _candidate_records(options, compared, outcome) if listed else []
    chosen = (rag, pair.rag_text) if verdict.choice == "rag" else (direct, pair.direct_text)
    # The shown candidate's margins at the recorded lambda_bind, whichever policy decided
    # (under the rule they are the verdict's own; a one-margin verdict carries M_bind or
    # M_prior as its M, and a single source none).
    margins = outcome.margins[shown]
    audit = rule.policy != "rule"
    paper = outcome.paper
    return Decision(
        id=valid.id,
        question=valid.question,
        answer=returned_text(*chosen, config),
        source=source,
        reason=verdict.reason,
        direct_answer=pair.direct_text,
        rag_answer=pair.rag_text,
        direct_generated=direct.generated,
        rag_generated=rag.generated,
        direct_raw=_raw(direct, pair.direct_text),
        rag_raw=_raw(rag, pair.rag_text),
        direct_likelihoods=_direct_likelihoods(outcome, shown),
        rag_likelihoods=outcome.likelihoods[shown],
        scoring_form=pair.form,
        direct_spans=_offsets(pair.direct_spans),
        rag_spans=_offsets(pair.rag_spans),
        m_prior=margins.m_prior if margins else None,
        m_bind=margins.m_bind if margins else None,
        m=margins.m if margins else None,
        lambda_bind=rule.lambda_bind,
        tau=rule.tau,
        passages_given=context.passages_given,
        passages_used=context.passages_used,
        passages=valid.refs[:context.passages_used],
        context_tokens=context.num_tokens,
        context_truncated=context.truncated,
        model_id=model_id,
        prompt_version=PROMPT_VERSION,
        timings=timings,
        warnings=evidence.warnings,
        prompts=prepared.views if keep_prompts else None,
        metadata=valid.metadata,
        rag_candidates=records,
        winner=shown if listed and verdict.choice == "rag" else None,
        policy=rule.policy,
        paper_choice=paper.choice if audit and paper else None,
        paper_winner=(paper.candidate if audit and paper and listed and paper.choice == "rag"
                      else None),
    )


def _offsets(spans: tuple[Span, ...] | None) -> list[tuple[int, int]] | None:
    """Spans as the record keeps them: ``[start, end)`` pairs."""
    return None if spans is None else [(s.start, s.end) for s in spans]


def _direct_likelihoods(outcome: _Outcome, shown: int) -> ViewLikelihoods | None:
    """Direct's likelihoods in the shown candidate's pair; for a shown candidate that was not
    scored (one equal to Direct), Direct's from the first scored pair."""
    own = outcome.direct_likelihoods[shown]
    return own if own is not None else next(
        (d for d in outcome.direct_likelihoods if d is not None), None)
