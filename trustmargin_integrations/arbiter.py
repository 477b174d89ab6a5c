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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from trustmargin_integrations.answers import answers_agree, clean_answer
from trustmargin_integrations.backends.base import (
    Backend,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
)
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.margins import Verdict, compute_margins, decide, settle
from trustmargin_integrations.prompts import PROMPT_VERSION, BuiltContext, build_context, view_texts
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import (
    ArbitrationInput,
    Decision,
    Passage,
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


class TrustMargin:
    """Answer-level source arbitration between a Direct and a RAG answer.

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

        ``calibration``: a file written by ``trustmargin calibrate`` (or a loaded
        :class:`~.evaluation.calibration.Calibration`); its lambda_bind and tau replace the
        config's, after checking it was fitted for this model and prompt version.
        """
        from trustmargin_integrations.backends.hf import HFBackend

        if calibration is None:
            return cls(HFBackend.load(model, **backend_kwargs), config)
        from trustmargin_integrations.evaluation.calibration import Calibration

        fitted = Calibration.coerce(calibration)  # a bad file fails before the model loads
        return cls.calibrated(HFBackend.load(model, **backend_kwargs), fitted, config)

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

        fitted = Calibration.coerce(calibration)
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
        id: str | None = None,
        include_prompts: bool | None = None,
    ) -> Decision:
        """Arbitrate one question; missing candidates are generated by the backend's model."""
        item = {"question": question, "passages": passages, "direct_answer": direct_answer,
                "rag_answer": rag_answer, "id": id}
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
        prepared = [item if isinstance(item, PreparedQuestion)
                    else self.prepare(item, where=f"inputs[{i}]")
                    for i, item in enumerate(inputs)]
        return self._arbitrate_prepared(prepared, include_prompts, progress=progress)

    # -- stages -----------------------------------------------------------------------------

    def prepare(
        self, item: ArbitrationInput | Mapping[str, Any], *, where: str | None = None,
        names: Mapping[str, str] | None = None,
    ) -> PreparedQuestion:
        """Validate one input, cut its context to the budget and render the three views.

        ``where`` and ``names`` only change how errors name fields (see
        :func:`~.validation.validate_input`).
        """
        valid = validate_input(item, where=where, names=names)
        budget = self._context_budget(valid)
        context = build_context(valid.passages, self.backend.count_tokens, budget,
                                self.backend.truncate_tokens,
                                getattr(self.backend, "count_tokens_batch", None))
        if context.truncated:
            valid.warnings.append(
                f"passages[0]: cut to {context.num_tokens} tokens to fit the context budget "
                f"of {budget} tokens"
            )
        elif context.passages_used < context.passages_given:
            valid.warnings.append(
                f"passages: used {context.passages_used} of {context.passages_given} to fit "
                f"the context budget of {budget} tokens"
            )
        texts = view_texts(valid.question, context.text)
        render = self.backend.render_prompt
        views = ViewPrompts(**{v: render(getattr(texts, v)) for v in _VIEWS})
        return PreparedQuestion(valid, context, views)

    def _context_budget(self, valid: ValidInput) -> int:
        """``max_context_tokens``, capped so the longest prompt plus generation fits the
        model's window; a question that cannot fit at all is a typed error."""
        budget = self.config.max_context_tokens
        window = getattr(self.backend, "context_window", None)
        if not window:
            return budget
        texts = view_texts(valid.question, "")
        count, render = self.backend.count_tokens, self.backend.render_prompt
        # A given candidate is scored after every prompt, so it needs the room that
        # generation would otherwise take (cleaning can only shorten it).
        answer = self.config.max_new_tokens
        for key in ("direct_answer", "rag_answer"):
            given = getattr(valid, key)
            size = count(given) if given else 0
            if size > window // 2:
                raise InvalidInputError(
                    valid.name(key),
                    f"is {size} tokens, too long to score in the model's {window}-token window",
                    "pass the short answer (a phrase), not a document")
            answer = max(answer, size)
        question_only = count(render(texts.question_only))
        # The passage lines add a few separator tokens the empty context does not show.
        fixed = count(render(texts.question_context)) + answer + 8
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
        """One model session: generate what is missing, settle or score, decide."""
        began = time.perf_counter()
        with self.backend.session() as session:
            direct = self._candidates(session, chunk, "direct")
            rag = self._candidates(session, chunk, "rag")
            verdicts: list[Verdict | None] = [
                self._settle(p, d.answer, r.answer) for p, d, r in zip(chunk, direct, rag,
                                                                        strict=True)
            ]
            to_score = [i for i, v in enumerate(verdicts) if v is None]
            scores: dict[int, dict[tuple[str, str], ContinuationScore]] = {}
            scoring_s = 0.0
            if to_score:
                start = time.perf_counter()
                scores = self._score(session, [(chunk[i], direct[i].answer, rag[i].answer)
                                               for i in to_score], to_score)
                scoring_s = (time.perf_counter() - start) / len(to_score)
        total = (time.perf_counter() - began) / len(chunk)
        out = []
        for i, prepared in enumerate(chunk):
            timings = Timings(generate_direct_s=direct[i].seconds,
                              generate_rag_s=rag[i].seconds,
                              scoring_s=scoring_s if i in scores else 0.0, total_s=total)
            out.append(self._decision(prepared, direct[i], rag[i], verdicts[i], scores.get(i),
                                      timings, keep_prompts))
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
        todo = [i for i, p in enumerate(chunk)
                if out[i] is None and (side == "direct" or p.has_evidence)]
        if todo:
            view = "question_only" if side == "direct" else "question_context"
            start = time.perf_counter()
            raw = session.generate([getattr(chunk[i].views, view) for i in todo],
                                   self.config.max_new_tokens)
            share = (time.perf_counter() - start) / len(todo)
            for i, text in zip(todo, raw, strict=True):
                out[i] = self._cleaned(text, generated=True, seconds=share)
        return [c or _Candidate("", None, False) for c in out]

    def _cleaned(self, text: str, *, generated: bool, seconds: float = 0.0) -> _Candidate:
        answer = clean_answer(text) if self.config.clean_answers else text.strip()
        raw = None if answer == text.strip() else text
        return _Candidate(answer, raw, generated, seconds)

    def _blank(self, answer: str) -> bool:
        return not answer.strip() or self.backend.count_tokens(answer) == 0

    def _settle(self, prepared: PreparedQuestion, direct: str, rag: str) -> Verdict | None:
        return settle(
            has_evidence=prepared.has_evidence,
            direct_blank=self._blank(direct),
            rag_blank=self._blank(rag),
            agree_unscored=self.config.skip_scoring_when_agree and answers_agree(direct, rag),
        )

    @staticmethod
    def _score(
        session: ModelSession,
        rows: list[tuple[PreparedQuestion, str, str]],
        positions: list[int],
    ) -> dict[int, dict[tuple[str, str], ContinuationScore]]:
        """The six likelihoods (2 answers x 3 views) of every row, in one session call."""
        keys = [(side, view) for side in ("direct", "rag") for view in _VIEWS]
        requests = [
            ContinuationRequest(getattr(p.views, view), direct if side == "direct" else rag)
            for p, direct, rag in rows for side, view in keys
        ]
        flat = session.score(requests)
        n = len(keys)
        return {pos: dict(zip(keys, flat[j * n:(j + 1) * n], strict=True))
                for j, pos in enumerate(positions)}

    def _decision(
        self,
        prepared: PreparedQuestion,
        direct: _Candidate,
        rag: _Candidate,
        verdict: Verdict | None,
        scores: dict[tuple[str, str], ContinuationScore] | None,
        timings: Timings,
        keep_prompts: bool,
    ) -> Decision:
        cfg = self.config
        likelihoods: dict[str, ViewLikelihoods] = {}
        if verdict is None:
            assert scores is not None  # unsettled rows are always scored
            for side in ("direct", "rag"):
                likelihoods[side] = ViewLikelihoods(
                    **{view: scores[(side, view)].mean for view in _VIEWS},
                    num_tokens=scores[(side, "question_only")].num_tokens,
                )
            margins = compute_margins(likelihoods["direct"], likelihoods["rag"],
                                      cfg.lambda_bind)
            verdict = decide(margins.m_prior, margins.m_bind, cfg.lambda_bind, cfg.tau)
        agree = answers_agree(direct.answer, rag.answer)
        source = "agree" if agree and verdict.reason != "no_evidence" else verdict.choice
        valid, context = prepared.input, prepared.context
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
            direct_likelihoods=likelihoods.get("direct"),
            rag_likelihoods=likelihoods.get("rag"),
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
        )
