"""TrustMargin, the arbiter: the whole per-question pipeline, in one place.

    answer_batch:    questions --retrieve_batch--> passages --arbitrate_batch--> Decisions
    arbitrate_batch: validate -> context within the token budget -> three prompt views
                     -> (per batch, one model session)
                        generate missing candidates -> clean -> settle or score six
                        likelihoods -> margins -> rule -> Decision

Each stage lives in its own module: validation (:mod:`.validation`), retrieval
(:mod:`.retrieval.base`), context and prompts (:mod:`.prompts`), cleaning (:mod:`.answers`),
the model (:mod:`.backends`), the rule (:mod:`.margins`) and the record (:mod:`.schema`).
The backend is asked only to generate and to score; every decision about what to generate,
what to score and how to decide is made here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tqdm.auto import tqdm

from trustmargin_integrations.answers import answer_complete, answers_agree, clean_answer
from trustmargin_integrations.backends.base import (
    Backend,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    count_tokens_many,
)
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.margins import (
    Margins,
    Verdict,
    compute_margins,
    decide_among,
    settle_among,
)
from trustmargin_integrations.prompts import (
    PROMPT_VERSION,
    BuiltContext,
    build_contexts,
    view_texts,
)
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import (
    ArbitrationInput,
    Decision,
    Passage,
    RagCandidate,
    RagCandidatesInput,
    Timings,
    ViewLikelihoods,
    ViewPrompts,
)
from trustmargin_integrations.validation import ValidInput, check_question, validate_input

if TYPE_CHECKING:
    from trustmargin_integrations.evaluation.calibration import Calibration

_VIEWS = ("question_only", "question_context", "context_only")


@dataclass
class PreparedQuestion:
    """A validated question with its context and rendered views (before any model call)."""

    input: ValidInput
    context: BuiltContext
    views: ViewPrompts

    @property
    def has_evidence(self) -> bool:
        """At least one passage entered the context."""
        return self.context.passages_used > 0


@dataclass
class _Candidate:
    """One side's answer as it will be scored, with its pre-cleaning text and timing."""

    answer: str
    raw: str | None
    generated: bool
    seconds: float = 0.0
    name: str | None = None


@dataclass
class _Plan:
    """What one question needs after settling: its verdict, or which candidates to score.

    ``scored`` are the RAG candidates whose likelihoods are computed; ``copies`` maps a
    candidate whose text repeats an earlier one's to that one (same text, same prompts:
    the same likelihoods, so it is scored once and the earlier one wins the tie);
    ``agreeing`` are the unscored ones equal to Direct, which enter the rule with the
    margins of identical answers (0; see :mod:`.margins`).
    """

    verdict: Verdict | None
    blank: list[bool]
    scored: list[int] = field(default_factory=list)
    copies: dict[int, int] = field(default_factory=dict)
    agreeing: list[int] = field(default_factory=list)


class TrustMargin:
    """Answer-level source arbitration between a Direct and a RAG answer (or several RAG
    candidates: ``rag_candidates``).

    Args:
        backend: the engine that generates and scores (see :mod:`.backends`).
        config: hyper-parameters; the paper's defaults when omitted.

    Example:
        >>> tm = TrustMargin.from_pretrained()  # embedded SmolLM2-135M  # doctest: +SKIP
        >>> d = tm.arbitrate("Who wrote Hamlet?", ["Hamlet is a play by Shakespeare."])
        >>> d.answer, d.source, d.m  # doctest: +SKIP
    """

    def __init__(self, backend: Backend, config: TrustMarginConfig | None = None) -> None:
        self.backend = backend
        self.config = config or TrustMarginConfig()

    @classmethod
    def from_pretrained(
        cls,
        model: str = "smollm2-135m",
        *,
        config: TrustMarginConfig | None = None,
        calibration: str | Path | Calibration | None = None,
        **backend_kwargs: Any,
    ) -> TrustMargin:
        """Load a local transformers backend (a named model, HF id, directory or GGUF file).

        ``calibration``: a file written by ``trustmargin calibrate``, a loaded
        :class:`~.evaluation.calibration.Calibration`, or ``"shipped"`` for the calibration
        this package ships for a named model; its lambda_bind and tau replace the config's,
        after checking it was fitted for this model and prompt version.
        """
        from trustmargin_integrations.backends.loading import load_backend

        if calibration is None:
            return cls(load_backend(model, **backend_kwargs), config)
        from trustmargin_integrations.evaluation.calibration import Calibration

        # A bad file fails before the model loads.
        fitted = Calibration.coerce(calibration, model=model)
        return cls.calibrated(load_backend(model, **backend_kwargs), fitted, config)

    @classmethod
    def calibrated(
        cls,
        backend: Backend,
        calibration: str | Path | Calibration,
        config: TrustMarginConfig | None = None,
    ) -> TrustMargin:
        """An arbiter on ``backend`` whose lambda_bind and tau come from ``calibration``.

        Raises:
            InvalidInputError: (field ``calibration``) the file was fitted for another model
                or prompt version, or is not a calibration file.
        """
        from trustmargin_integrations.evaluation.calibration import Calibration

        fitted = Calibration.coerce(calibration, model=backend.model_id)
        fitted.check(backend.model_id, PROMPT_VERSION)
        return cls(backend, fitted.apply(config))

    # -- the pipeline -----------------------------------------------------------------------

    def answer(
        self,
        question: str,
        retriever: Retriever,
        k: int | None = None,
        *,
        direct_answer: str | None = None,
        rag_answer: str | None = None,
        include_prompts: bool | None = None,
    ) -> Decision:
        """Retrieve the top-``k`` passages, answer both ways with the model and arbitrate.

        A candidate given here is used instead of generating it. When retrieval finds
        nothing the closed-book answer is returned with reason ``no_evidence``.
        """
        check_question(question, "question")
        return self.answer_batch([question], retriever, k, direct_answers=[direct_answer],
                                 rag_answers=[rag_answer], include_prompts=include_prompts)[0]

    def answer_batch(
        self,
        questions: Sequence[str],
        retriever: Retriever,
        k: int | None = None,
        *,
        direct_answers: Sequence[str | None] | None = None,
        rag_answers: Sequence[str | None] | None = None,
        include_prompts: bool | None = None,
        progress: bool = False,
    ) -> list[Decision]:
        """:meth:`answer` for many questions: one retrieval batch, then batched arbitration.

        Args:
            questions: the questions, in order.
            retriever: any object with ``search(query, k) -> list[Passage]`` (the embedded
                :class:`~.retrieval.bm25.BM25Index`, an Elasticsearch retriever, ...).
            k: passages per question (default: ``config.top_k``).
            direct_answers, rag_answers: given candidates, one per question (None entries,
                or no list at all, are generated by the model).
            include_prompts: attach the rendered prompts (default: ``config.include_prompts``).
            progress: show a progress bar.
        """
        if isinstance(questions, str):
            raise InvalidInputError("questions", "is a single string",
                                    "pass a list of questions, or call answer(question, ...)")
        for i, q in enumerate(questions):
            check_question(q, f"questions[{i}]")
        given = {"direct_answer": direct_answers, "rag_answer": rag_answers}
        for key, values in given.items():
            if values is not None and len(values) != len(questions):
                raise InvalidInputError(f"{key}s", f"has {len(values)} entries for "
                                        f"{len(questions)} questions", "give one per question")
        hits = retrieve_batch(retriever, questions, self.config.top_k if k is None else k)
        inputs = [
            {"question": q, "passages": h,
             **{key: None if values is None else values[i] for key, values in given.items()}}
            for i, (q, h) in enumerate(zip(questions, hits, strict=True))
        ]
        return self.arbitrate_batch(inputs, include_prompts=include_prompts, progress=progress)

    def arbitrate(
        self,
        question: str,
        passages: Sequence[str | Passage],
        direct_answer: str | None = None,
        rag_answer: str | None = None,
        *,
        rag_candidates: RagCandidatesInput | None = None,
        id: str | None = None,
        include_prompts: bool | None = None,
    ) -> Decision:
        """Arbitrate one question; missing candidates are generated by the backend's model.

        ``rag_candidates`` replaces ``rag_answer`` with several RAG-side candidates (texts,
        ``(name, text)`` pairs, or a name -> text mapping such as ``{"bm25": ..., "ircot":
        ...}``): the rule keeps Direct or the best of them (:func:`~.margins.decide_among`)
        and nothing is generated for the RAG side. All of a question's candidates are
        scored in one model session call, so they share the prompts' caches.
        """
        item = {"question": question, "passages": passages, "direct_answer": direct_answer,
                "rag_answer": rag_answer, "rag_candidates": rag_candidates, "id": id}
        prepared = self.prepare(item)
        return self._arbitrate_prepared([prepared], include_prompts, progress=False)[0]

    def arbitrate_batch(
        self,
        inputs: Iterable[ArbitrationInput | Mapping[str, Any] | PreparedQuestion],
        *,
        include_prompts: bool | None = None,
        progress: bool = False,
    ) -> list[Decision]:
        """Arbitrate many questions, batched by prompt length; results keep input order.

        Every input is validated before the model runs; an error names its place
        (``inputs[3].question``). An input already returned by :meth:`prepare` (an adapter
        that validated it under its own field names) is used as it is, not prepared again.
        """
        return self._arbitrate_prepared(self.prepare_batch(inputs), include_prompts,
                                        progress=progress)

    # -- stages -----------------------------------------------------------------------------

    def prepare(
        self, item: ArbitrationInput | Mapping[str, Any], *, where: str | None = None,
        names: Mapping[str, str] | None = None,
    ) -> PreparedQuestion:
        """Validate one input, cut its context to the budget and render the three views.

        ``where`` and ``names`` only change how errors name fields (see
        :func:`~.validation.validate_input`).
        """
        return self._prepare_valid([validate_input(item, where=where, names=names)])[0]

    def prepare_batch(
        self, inputs: Iterable[ArbitrationInput | Mapping[str, Any] | PreparedQuestion],
    ) -> list[PreparedQuestion]:
        """:meth:`prepare` for many inputs, tokenized together (results keep input order).

        Every input is validated first; an error names its place (``inputs[3].question``).
        An input already returned by :meth:`prepare` is kept as it is.
        """
        items = list(inputs)
        valid = {i: validate_input(item, where=f"inputs[{i}]") for i, item in enumerate(items)
                 if not isinstance(item, PreparedQuestion)}
        fresh = dict(zip(valid, self._prepare_valid(list(valid.values())), strict=True))
        return [fresh[i] if i in fresh else cast("PreparedQuestion", item)
                for i, item in enumerate(items)]

    def _prepare_valid(self, inputs: list[ValidInput]) -> list[PreparedQuestion]:
        """Budgets, contexts and views of validated inputs, with one tokenizer call per stage
        for all of them (see :func:`~.prompts.build_contexts`)."""
        budgets = self._context_budgets(inputs)
        contexts = build_contexts([valid.passages for valid in inputs], budgets,
                                  self.backend.count_tokens, self.backend.truncate_tokens,
                                  partial(count_tokens_many, self.backend))
        render = self.backend.render_prompt
        prepared = []
        for valid, budget, context in zip(inputs, budgets, contexts, strict=True):
            if context.truncated:
                valid.warnings.append(
                    f"passages[0]: cut to {context.num_tokens} tokens to fit the context "
                    f"budget of {budget} tokens"
                )
            elif context.passages_used < context.passages_given:
                valid.warnings.append(
                    f"passages: used {context.passages_used} of {context.passages_given} to "
                    f"fit the context budget of {budget} tokens"
                )
            texts = view_texts(valid.question, context.text)
            views = ViewPrompts(**{v: render(getattr(texts, v)) for v in _VIEWS})
            prepared.append(PreparedQuestion(valid, context, views))
        return prepared

    def _context_budgets(self, inputs: Sequence[ValidInput]) -> list[int]:
        """Each input's ``max_context_tokens``, capped so its longest prompt plus generation
        fits the model's window; a question that cannot fit at all is a typed error."""
        window = getattr(self.backend, "context_window", None)
        if not window:
            return [self.config.max_context_tokens] * len(inputs)
        render = self.backend.render_prompt
        plans = []  # per input: its given candidates (field name, text) and its fixed prompts
        texts: list[str] = []
        for valid in inputs:
            views = view_texts(valid.question, "")
            given = [(valid.name(key), getattr(valid, key))
                     for key in ("direct_answer", "rag_answer")]
            given += [(valid.name("rag_candidates", f"[{i}]"), text)
                      for i, (_, text) in enumerate(valid.rag_candidates or [])]
            given = [(name, text) for name, text in given if text]
            plans.append((len(texts), given))
            texts += [render(views.question_only), render(views.question_context)]
            texts += [text for _, text in given]
        counts = count_tokens_many(self.backend, texts)
        return [self._capped_budget(valid, window, counts[at:at + 2 + len(given)], given)
                for valid, (at, given) in zip(inputs, plans, strict=True)]

    def _capped_budget(self, valid: ValidInput, window: int, counts: Sequence[int],
                       given: Sequence[tuple[str, str]]) -> int:
        """One input's budget from its counted prompts (question-only, question+empty
        context) and given candidates."""
        budget = self.config.max_context_tokens
        # A given candidate is scored after every prompt, so it needs the room that
        # generation would otherwise take (cleaning can only shorten it).
        answer = self.config.max_new_tokens
        for (field_name, _), size in zip(given, counts[2:], strict=True):
            if size > window // 2:
                raise InvalidInputError(
                    field_name,
                    f"is {size} tokens, too long to score in the model's {window}-token window",
                    "pass the short answer (a phrase), not a document")
            answer = max(answer, size)
        question_only = counts[0]
        # The passage lines add a few separator tokens the empty context does not show.
        fixed = counts[1] + answer + 8
        if question_only + answer > window or window - fixed < 16:
            raise InvalidInputError(
                valid.name("question"),
                f"is too long: its prompts take {max(question_only, fixed)} of the model's "
                f"{window}-token window before any passage",
                "shorten the question (or use a model with a longer window)")
        if window - fixed < budget:
            valid.warnings.append(f"passages: context budget capped at {window - fixed} "
                                  f"tokens to fit the model's {window}-token window")
            budget = window - fixed
        return budget

    def _arbitrate_prepared(
        self, prepared: list[PreparedQuestion], include_prompts: bool | None, *, progress: bool
    ) -> list[Decision]:
        if not prepared:
            return []
        keep_prompts = self.config.include_prompts if include_prompts is None else include_prompts
        # Length-sorted batches keep left padding (and so wasted compute) small.
        order = sorted(range(len(prepared)), key=lambda i: len(prepared[i].views.question_context))
        decisions: list[Decision | None] = [None] * len(prepared)
        size = self.config.batch_size
        with tqdm(total=len(prepared), desc="arbitrating", unit="q",
                  disable=not progress) as bar:
            for start in range(0, len(order), size):
                chunk = order[start:start + size]
                done = self._arbitrate_chunk([prepared[i] for i in chunk], keep_prompts)
                for i, decision in zip(chunk, done, strict=True):
                    decisions[i] = decision
                bar.update(len(chunk))
        return [d for d in decisions if d is not None]

    def _arbitrate_chunk(
        self, chunk: list[PreparedQuestion], keep_prompts: bool
    ) -> list[Decision]:
        """One model session: generate what is missing, settle or score, decide.

        A pairwise question is the one-candidate case of a multi-candidate one: the same
        settling, scoring and rule (:func:`~.margins.settle_among`,
        :func:`~.margins.decide_among`) give it today's pairwise decision.
        """
        began = time.perf_counter()
        with self.backend.session() as session:
            direct = self._candidates(session, chunk, "direct")
            rag = self._candidates(session, chunk, "rag")
            options = [self._options(p, r) for p, r in zip(chunk, rag, strict=True)]
            plans = [self._plan(p, d.answer, [o.answer for o in opts])
                     for p, d, opts in zip(chunk, direct, options, strict=True)]
            to_score = [i for i, plan in enumerate(plans) if plan.verdict is None]
            scores: dict[int, list[ViewLikelihoods]] = {}
            scoring_s = 0.0
            if to_score:
                start = time.perf_counter()
                # Every question of the chunk, with all its candidates, in one session call:
                # the transformers fast path scores all answers of a prompt off one cache.
                rows = [(chunk[i], [direct[i].answer]
                         + [options[i][j].answer for j in plans[i].scored])
                        for i in to_score]
                scores = self._score(session, rows, to_score)
                scoring_s = (time.perf_counter() - start) / len(to_score)
        total = (time.perf_counter() - began) / len(chunk)
        out = []
        for i, prepared in enumerate(chunk):
            timings = Timings(generate_direct_s=direct[i].seconds,
                              generate_rag_s=rag[i].seconds,
                              scoring_s=scoring_s if i in scores else 0.0, total_s=total)
            out.append(self._decision(prepared, direct[i], options[i], plans[i],
                                      scores.get(i), timings, keep_prompts))
        return out

    def _candidates(
        self, session: ModelSession, chunk: list[PreparedQuestion], side: str
    ) -> list[_Candidate]:
        """Both given and generated candidates of one side, cleaned by the one policy."""
        given = [getattr(p.input, f"{side}_answer") for p in chunk]
        out: list[_Candidate | None] = [None] * len(chunk)
        for i, text in enumerate(given):
            if text is not None:
                out[i] = self._cleaned(text, generated=False)
                if out[i].raw is not None:  # type: ignore[union-attr]
                    chunk[i].input.warnings.append(
                        f"{side}_answer: cleaned to its short-answer form "
                        f"({text!r} -> {out[i].answer!r})")  # type: ignore[union-attr]
        # A RAG answer without evidence is never needed: the decision is "no_evidence".
        # A question with rag_candidates has its RAG side given: nothing is generated.
        todo = [i for i, p in enumerate(chunk)
                if out[i] is None and (side == "direct" or (
                    p.has_evidence and p.input.rag_candidates is None))]
        if todo:
            view = "question_only" if side == "direct" else "question_context"
            start = time.perf_counter()
            raw = session.generate([getattr(chunk[i].views, view) for i in todo],
                                   self.config.max_new_tokens, stop=answer_complete)
            share = (time.perf_counter() - start) / len(todo)
            for i, text in zip(todo, raw, strict=True):
                out[i] = self._cleaned(text, generated=True, seconds=share)
        return [c or _Candidate("", None, False) for c in out]

    def _cleaned(self, text: str, *, generated: bool, seconds: float = 0.0) -> _Candidate:
        answer = clean_answer(text) if self.config.clean_answers else text.strip()
        raw = None if answer == text.strip() else text
        return _Candidate(answer, raw, generated, seconds)

    def _options(self, prepared: PreparedQuestion, rag: _Candidate) -> list[_Candidate]:
        """The RAG-side candidates of one question: the pairwise answer, or the given list
        cleaned by the one policy (a change is reported like a cleaned ``rag_answer``)."""
        given = prepared.input.rag_candidates
        if given is None:
            return [rag]
        out = []
        for i, (label, text) in enumerate(given):
            option = self._cleaned(text, generated=False)
            option.name = label
            if option.raw is not None:
                prepared.input.warnings.append(
                    f"rag_candidates[{i}]: cleaned to its short-answer form "
                    f"({text!r} -> {option.answer!r})")
            out.append(option)
        return out

    def _blank(self, answer: str) -> bool:
        return not answer.strip() or self.backend.count_tokens(answer) == 0

    def _plan(self, prepared: PreparedQuestion, direct: str, rag: list[str]) -> _Plan:
        """Settle the question, or say which candidates need likelihoods (see _Plan)."""
        blank = [self._blank(answer) for answer in rag]
        skip = self.config.skip_scoring_when_agree
        agree = [skip and not b and answers_agree(direct, answer)
                 for b, answer in zip(blank, rag, strict=True)]
        verdict = settle_among(has_evidence=prepared.has_evidence,
                               direct_blank=self._blank(direct), rag_blank=blank,
                               agree_unscored=agree)
        if verdict is not None:
            return _Plan(verdict, blank)
        plan = _Plan(None, blank, agreeing=[j for j in range(len(rag)) if agree[j]])
        first: dict[str, int] = {}
        for j, answer in enumerate(rag):
            if blank[j] or agree[j]:
                continue
            if answer in first:
                plan.copies[j] = first[answer]
            else:
                first[answer] = j
                plan.scored.append(j)
        return plan

    @staticmethod
    def _score(
        session: ModelSession,
        rows: list[tuple[PreparedQuestion, list[str]]],
        positions: list[int],
    ) -> dict[int, list[ViewLikelihoods]]:
        """Every answer's three-view likelihoods (Direct first), all rows in one call.

        A pairwise row is Direct then RAG, each over the three views: the six requests
        in the order they have always been sent.
        """
        requests = [ContinuationRequest(getattr(p.views, view), answer)
                    for p, answers in rows for answer in answers for view in _VIEWS]
        flat = iter(session.score(requests))
        out: dict[int, list[ViewLikelihoods]] = {}
        for (_, answers), pos in zip(rows, positions, strict=True):
            out[pos] = [_likelihoods([next(flat) for _ in _VIEWS]) for _ in answers]
        return out

    def _decision(
        self,
        prepared: PreparedQuestion,
        direct: _Candidate,
        options: list[_Candidate],
        plan: _Plan,
        scores: list[ViewLikelihoods] | None,
        timings: Timings,
        keep_prompts: bool,
    ) -> Decision:
        cfg = self.config
        verdict = plan.verdict
        direct_likelihoods: ViewLikelihoods | None = None
        likelihoods: list[ViewLikelihoods | None] = [None] * len(options)
        margins: list[Margins | None] = [None] * len(options)
        if verdict is None:
            assert scores is not None  # unsettled rows are always scored
            direct_likelihoods = scores[0]
            for j, scored in zip(plan.scored, scores[1:], strict=True):
                likelihoods[j] = scored
                margins[j] = compute_margins(direct_likelihoods, scored, cfg.lambda_bind)
            for j, earlier in plan.copies.items():
                likelihoods[j], margins[j] = likelihoods[earlier], margins[earlier]
            for j in plan.agreeing:
                # Equal to Direct: the margins of identical answers, without scoring.
                margins[j] = Margins(0.0, 0.0, 0.0)
            verdict = decide_among([None if m is None else (m.m_prior, m.m_bind)
                                    for m in margins], cfg.lambda_bind, cfg.tau)
        # The candidate the pairwise fields describe: the kept or best-margin one, else (a
        # settled verdict keeping Direct) the first non-blank one.
        shown = verdict.candidate
        if shown is None:
            shown = next((j for j, blank in enumerate(plan.blank) if not blank), 0)
        rag = options[shown]
        agree = answers_agree(direct.answer, rag.answer)
        source = "agree" if agree and verdict.reason != "no_evidence" else verdict.choice
        valid, context = prepared.input, prepared.context
        listed = valid.rag_candidates is not None
        records = [
            RagCandidate(name=o.name, answer=o.answer, raw=o.raw,
                         agrees_with_direct=answers_agree(direct.answer, o.answer),
                         likelihoods=likelihoods[j], **asdict(m) if m is not None else {})
            for j, (o, m) in enumerate(zip(options, margins, strict=True))
        ] if listed else []
        return Decision(
            id=valid.id,
            question=valid.question,
            answer=rag.answer if verdict.choice == "rag" else direct.answer,
            source=source,
            reason=verdict.reason,
            direct_answer=direct.answer,
            rag_answer=rag.answer,
            direct_generated=direct.generated,
            rag_generated=rag.generated,
            direct_raw=direct.raw,
            rag_raw=rag.raw,
            direct_likelihoods=direct_likelihoods,
            rag_likelihoods=likelihoods[shown],
            m_prior=verdict.margins.m_prior if verdict.margins else None,
            m_bind=verdict.margins.m_bind if verdict.margins else None,
            m=verdict.margins.m if verdict.margins else None,
            lambda_bind=cfg.lambda_bind,
            tau=cfg.tau,
            passages_given=context.passages_given,
            passages_used=context.passages_used,
            passages=valid.refs[:context.passages_used],
            context_tokens=context.num_tokens,
            context_truncated=context.truncated,
            model_id=self.backend.model_id,
            prompt_version=PROMPT_VERSION,
            timings=timings,
            warnings=list(valid.warnings),
            prompts=prepared.views if keep_prompts else None,
            metadata=valid.metadata,
            rag_candidates=records,
            winner=shown if listed and verdict.choice == "rag" else None,
        )


def _likelihoods(scores: list[ContinuationScore]) -> ViewLikelihoods:
    """One answer's record from its scores under the three views (in ``_VIEWS`` order)."""
    return ViewLikelihoods(**{view: s.mean for view, s in zip(_VIEWS, scores, strict=True)},
                           num_tokens=scores[0].num_tokens)
