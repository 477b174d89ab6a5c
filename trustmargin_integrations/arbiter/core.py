"""TrustMargin: the public API (load, answer, arbitrate, prepare) and the scheduling of
prepared questions into the engine's model calls (``Backend.batches``).

No likelihood depends on the rule's numbers, so the policy is an argument of every call
(``policy=``, default ``config.decision_policy``) and questions under different policies share
one batch; a cached Decision replays under any policy (:mod:`trustmargin_integrations.rule.replay`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from tqdm.auto import tqdm

from trustmargin_integrations.arbiter.candidates import Candidate, rag_options, side_candidates
from trustmargin_integrations.arbiter.comparisons import (
    Compared,
    compare_chunk,
    states_short_answers,
    whole,
)
from trustmargin_integrations.arbiter.decision import Evidence, assemble_decision
from trustmargin_integrations.arbiter.plan import (
    Plan,
    plan_question,
    plan_unscored,
    score_rows,
)
from trustmargin_integrations.arbiter.preparation import PreparedQuestion, prepare_valid
from trustmargin_integrations.backends.base import Backend, ModelSession
from trustmargin_integrations.backends.loading import load_backend, recorded_model_id
from trustmargin_integrations.backends.spec import BackendSpec
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.policy_file import AUTO, PolicyFile, policy_file_for
from trustmargin_integrations.prompts import PROMPT_VERSION
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision, Passage, Timings, ViewLikelihoods
from trustmargin_integrations.validation import (
    ArbitrationInput,
    FieldNames,
    RagCandidatesInput,
    check_instance,
    is_blank_text,
    validate_input,
)
from trustmargin_integrations.vocabulary import check_rule_value

PolicyArg = Policy | Sequence[Policy | None] | None
"""A call's policy: one for every input, one per input (None: the config's), or None (the
config's, ``TrustMarginConfig.decision_policy``)."""


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

    def __init__(self, backend: Backend,
                 config: TrustMarginConfig | Mapping[str, Any] | None = None) -> None:
        if not isinstance(backend, Backend):
            raise InvalidInputError("backend", f"a {type(backend).__name__} is not a Backend",
                                    "pass TrustMargin.from_pretrained(model) or a Backend "
                                    "such as HFBackend.load(model)")
        self.backend = backend
        self.config = _config(config) or TrustMarginConfig()

    @classmethod
    def from_pretrained(
        cls,
        model: str | BackendSpec = "smollm2-135m",
        *,
        config: TrustMarginConfig | None = None,
        calibration: str | Path | PolicyFile | None = AUTO,
        **backend_kwargs: Any,
    ) -> TrustMargin:
        """Load the backend a spec names (:mod:`~trustmargin_integrations.backends.spec`): a
        local transformers model (``hf:NAME`` or a bare named model, HF id, directory or GGUF
        file) or an OpenAI-compatible server (``openai:URL#MODEL``).

        ``calibration`` (:func:`~trustmargin_integrations.policy_file.policy_file_for`) says
        who decides:

        - ``"auto"`` (the default): the policy this package ships for a named model (the domain
          check's verdict; for ``smollm2-135m`` and ``qwen2.5-1.5b`` it is always-RAG); any
          other model gets the paper's rule, and a warning logged once says that the domain
          check (``trustmargin check``) should decide. A ``config`` that sets ``policy``,
          ``tau`` or ``lambda_bind`` keeps its own rule.
        - ``None``: the paper's rule (lambda_bind 0.5, tau -1.5), or the rule ``config`` sets.
        - a file written by ``trustmargin calibrate`` / ``trustmargin check``, a loaded
          :class:`~trustmargin_integrations.policy_file.PolicyFile`, or ``"shipped"``: its
          policy and numbers replace the config's, after checking it was fitted for this model
          and prompt version.

        ``backend_kwargs`` go to the backend (``device``, ``dtype``, ``progress``, ...).
        """
        spec = BackendSpec.coerce(model, "model")
        config = _config(config)
        # A bad file fails before the model loads.
        fitted = policy_file_for(calibration, spec.model, config)
        if fitted is not None:
            fitted.checked_config(recorded_model_id(spec), PROMPT_VERSION, config)
        backend = load_backend(spec, field="model", **backend_kwargs)
        return cls(backend, config) if fitted is None else cls.calibrated(backend, fitted, config)

    @classmethod
    def calibrated(
        cls,
        backend: Backend,
        calibration: str | Path | PolicyFile,
        config: TrustMarginConfig | None = None,
    ) -> TrustMargin:
        """An arbiter on ``backend`` whose decision policy (and the numbers it takes) comes
        from the policy file ``calibration``.

        Raises:
            InvalidInputError: (field ``calibration``) the file was fitted for another model
                or prompt version, or is not a policy file (or holds a field its policy does
                not use).
        """
        fitted = PolicyFile.coerce(calibration, model=backend.model_id)
        settings = fitted.checked_config(backend.model_id, PROMPT_VERSION, config)
        fitted.warn_other_backend(backend.capabilities.kind, backend.capabilities.model)
        return cls(backend, settings)

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
        policy: Policy | None = None,
    ) -> Decision:
        """Retrieve the top-``k`` passages, answer both ways with the model and arbitrate.

        A candidate given here is used instead of generating it. When retrieval finds
        nothing the closed-book answer is returned with reason ``no_evidence``. ``policy``
        decides instead of the config's (:data:`PolicyArg`).
        """
        entry = validate_input({"question": question, "passages": [],
                                "direct_answer": direct_answer, "rag_answer": rag_answer})
        return self._answer_entries([entry], [question], retriever, k,
                                    include_prompts=include_prompts, progress=False,
                                    policy=policy)[0]

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
        policy: PolicyArg = None,
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
            policy: who decides (:data:`PolicyArg`; default: the config's policy).
        """
        if isinstance(questions, str):
            raise InvalidInputError("questions", "is a single string",
                                    "pass a list of questions, or call answer(question, ...)")
        given = {"direct_answer": direct_answers, "rag_answer": rag_answers}
        for key, values in given.items():
            if values is not None and len(values) != len(questions):
                raise InvalidInputError(f"{key}s", f"has {len(values)} entries for "
                                        f"{len(questions)} questions", "give one per question")
        # Each question is validated here, once, before the retriever sees it; errors name
        # the caller's arguments (questions[i], direct_answers[i]).
        entries = [
            validate_input({"question": q, "passages": [],
                            **{key: None if values is None else values[i]
                               for key, values in given.items()}},
                           names={"question": f"questions[{i}]",
                                  "direct_answer": f"direct_answers[{i}]",
                                  "rag_answer": f"rag_answers[{i}]"})
            for i, q in enumerate(questions)
        ]
        return self._answer_entries(entries, list(questions), retriever, k,
                                    include_prompts=include_prompts, progress=progress,
                                    policy=policy)

    def _answer_entries(
        self, entries: list[ArbitrationInput], questions: list[str], retriever: Retriever,
        k: int | None, *, include_prompts: bool | None, progress: bool, policy: PolicyArg,
    ) -> list[Decision]:
        """Retrieve for validated inputs without passages (``questions`` as the caller
        gave them: what the retriever has always been asked), then arbitrate them."""
        hits = retrieve_batch(retriever, questions, self.config.top_k if k is None else k)
        inputs = [entry.with_passages(found, FieldNames(f"inputs[{i}]"))
                  for i, (entry, found) in enumerate(zip(entries, hits, strict=True))]
        return self.arbitrate_batch(inputs, include_prompts=include_prompts, progress=progress,
                                    policy=policy)

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
        policy: Policy | None = None,
    ) -> Decision:
        """Arbitrate one question; missing candidates are generated by the backend's model.

        ``rag_candidates`` replaces ``rag_answer`` with several RAG-side candidates (texts,
        ``(name, text)`` pairs, or a name -> text mapping such as ``{"bm25": ..., "ircot":
        ...}``): the policy keeps Direct or the best of them
        (:meth:`~trustmargin_integrations.rule.Policy.verdict`) and nothing is generated for
        the RAG side. All of a question's candidates are scored in one model session call,
        so they share the prompts' caches. ``policy`` decides instead of the config's.
        """
        item = {"question": question, "passages": passages, "direct_answer": direct_answer,
                "rag_answer": rag_answer, "rag_candidates": rag_candidates, "id": id}
        prepared = self.prepare(item)
        return self._arbitrate_prepared([prepared], include_prompts, progress=False,
                                        policies=self._policies(policy, 1))[0]

    def arbitrate_batch(
        self,
        inputs: Iterable[ArbitrationInput | Mapping[str, Any] | PreparedQuestion],
        *,
        include_prompts: bool | None = None,
        progress: bool = False,
        policy: PolicyArg = None,
    ) -> list[Decision]:
        """Arbitrate many questions, batched by prompt length; results keep input order.

        Every input is validated before the model runs; an error names its place
        (``inputs[3].question``). An input already returned by :meth:`prepare` (an adapter
        that validated it under its own field names) is used as it is, not prepared again.

        ``policy`` (:data:`PolicyArg`) decides instead of the config's, for every input or
        per input: inputs under different policies are still scored together (no
        likelihood depends on the policy), and each Decision records its own policy.
        """
        prepared = self.prepare_batch(inputs)
        return self._arbitrate_prepared(prepared, include_prompts, progress=progress,
                                        policies=self._policies(policy, len(prepared)))

    def _policies(self, policy: PolicyArg, n: int) -> list[Policy]:
        """One policy per input (:data:`PolicyArg`), the config's where none is given."""
        default = self.config.decision_policy
        if policy is None or isinstance(policy, Policy):
            return [_recordable(policy, "policy") if policy else default] * n
        if isinstance(policy, str) or not isinstance(policy, Sequence):
            raise InvalidInputError("policy", f"a {type(policy).__name__} is not a policy",
                                    "pass a Policy (e.g. Policy.fitted(0.5, -1.0)), a list "
                                    "of one per input, or None for the config's")
        if len(policy) != n:
            raise InvalidInputError("policy", f"has {len(policy)} policies for {n} inputs",
                                    "give one per input (None: the config's)")
        out = []
        for i, item in enumerate(policy):
            if item is not None and not isinstance(item, Policy):
                raise InvalidInputError(f"policy[{i}]", f"a {type(item).__name__} is not a "
                                        "policy", "pass a Policy, or None for the config's")
            out.append(_recordable(item, f"policy[{i}]") if item else default)
        return out

    # -- stages -----------------------------------------------------------------------------

    def prepare(
        self, item: ArbitrationInput | Mapping[str, Any], *, where: str | None = None,
        names: Mapping[str, str] | None = None,
    ) -> PreparedQuestion:
        """Validate one input, cut its context to the budget and render the three views.

        ``where`` and ``names`` only change how errors name fields (see
        :func:`~.validation.validate_input`). An :class:`ArbitrationInput` was validated
        when it was built and is not checked again.
        """
        return prepare_valid(self.backend, self.config,
                             [validate_input(item, where=where, names=names)],
                             [FieldNames(where, names)])[0]

    def prepare_batch(
        self, inputs: Iterable[ArbitrationInput | Mapping[str, Any] | PreparedQuestion],
        *, wheres: Sequence[str] | None = None,
    ) -> list[PreparedQuestion]:
        """:meth:`prepare` for many inputs, tokenized together (results keep input order).

        Every input is validated first; an error or warning names its place: ``wheres[i]``
        when given (e.g. ``input.jsonl:12``), else ``inputs[i]``. An input already returned
        by :meth:`prepare` is kept as it is.
        """
        items = _listed(inputs)
        if wheres is not None and len(wheres) != len(items):
            raise InvalidInputError("wheres", f"has {len(wheres)} names for {len(items)} inputs",
                                    "give one name per input, or none")
        names = list(wheres) if wheres is not None else [f"inputs[{i}]" for i in range(len(items))]
        valid = {i: validate_input(item, where=names[i]) for i, item in enumerate(items)
                 if not isinstance(item, PreparedQuestion)}
        fresh = dict(zip(valid, prepare_valid(self.backend, self.config, list(valid.values()),
                                              [FieldNames(names[i]) for i in valid]),
                         strict=True))
        return [fresh[i] if i in fresh else cast("PreparedQuestion", item)
                for i, item in enumerate(items)]

    def score_batch(
        self,
        inputs: Iterable[ArbitrationInput | Mapping[str, Any] | PreparedQuestion],
        *,
        include_prompts: bool | None = None,
        progress: bool = False,
    ) -> list[Evidence]:
        """Score many questions without deciding them: the model's whole share of
        :meth:`arbitrate_batch` (generation, comparison, settling, the six likelihoods).

        Turn each result into a Decision with :meth:`decide`, under as many policies as you
        like: no likelihood depends on the policy, so the model runs once.
        """
        return self._score_prepared(self.prepare_batch(inputs), include_prompts,
                                    progress=progress)

    def decide(self, evidence: Evidence, policy: Policy | None = None) -> Decision:
        """The Decision of scored ``evidence`` (:meth:`score_batch`) under ``policy``
        (default: the config's). Runs no model."""
        check_instance(evidence, Evidence, "evidence",
                       "pass one item of the list score_batch returns")
        return assemble_decision(evidence, config=self.config,
                                 policy=self._policies(policy, 1)[0])

    def _arbitrate_prepared(
        self, prepared: list[PreparedQuestion], include_prompts: bool | None, *, progress: bool,
        policies: list[Policy],
    ) -> list[Decision]:
        evidence = self._score_prepared(prepared, include_prompts, progress=progress,
                                        policies=policies)
        return [assemble_decision(e, config=self.config, policy=p)
                for e, p in zip(evidence, policies, strict=True)]

    def _score_prepared(
        self, prepared: list[PreparedQuestion], include_prompts: bool | None, *, progress: bool,
        policies: Sequence[Policy] | None = None,
    ) -> list[Evidence]:
        """Each question's evidence. ``policies`` (one per question) are those its Decision
        will be made under: a question whose policy keeps one side whatever the margins
        (:meth:`~trustmargin_integrations.rule.Policy.unscored`) gets only what that side
        needs (:meth:`_sides`) and no scoring. None: everything is scored
        (:meth:`score_batch`)."""
        if not prepared:
            return []
        keep_prompts = self.config.include_prompts if include_prompts is None else include_prompts
        fixed = ([None] * len(prepared) if policies is None else
                 [p if p.unscored(_candidate_count(q)) is not None else None
                  for q, p in zip(prepared, policies, strict=True)])
        # The engine groups the questions into model calls (a local model by length).
        calls = self.backend.batches([len(p.views.question_context) for p in prepared],
                                     self.config.batch_size)
        evidence: list[Evidence | None] = [None] * len(prepared)
        with tqdm(total=len(prepared), desc="arbitrating", unit="q",
                  disable=not progress) as bar:
            for chunk in calls:
                done = self._score_chunk([prepared[i] for i in chunk], keep_prompts,
                                         [fixed[i] for i in chunk])
                for i, scored in zip(chunk, done, strict=True):
                    evidence[i] = scored
                bar.update(len(chunk))
        return [e for e in evidence if e is not None]

    def _score_chunk(self, chunk: list[PreparedQuestion], keep_prompts: bool,
                     fixed: list[Policy | None]) -> list[Evidence]:
        """One model session: generate what is missing, compare each pair, settle or score.

        A pairwise question is the one-candidate case of a multi-candidate one: the same
        settling, scoring and rule (:func:`~trustmargin_integrations.rule.settle_among`,
        :meth:`~trustmargin_integrations.rule.Policy.verdict`) give it today's pairwise
        decision. A question with a ``fixed`` policy (one that keeps a side whatever the
        margins) is neither compared nor scored (:func:`.plan.plan_unscored`).
        """
        began = time.perf_counter()
        scored_here = [i for i, policy in enumerate(fixed) if policy is None]
        compared: list[list[Compared]] = [[] for _ in chunk]
        plans: list[Plan | None] = [None] * len(chunk)
        with self.backend.session() as session:
            direct, rag, options = self._sides(session, chunk, fixed)
            comparing_s = 0.0
            if scored_here:
                start = time.perf_counter()
                pairs = compare_chunk(session, self.backend.render_prompt, self.config,
                                      [chunk[i] for i in scored_here],
                                      [direct[i] for i in scored_here],
                                      [options[i] for i in scored_here],
                                      states_short_answers(self.backend.capabilities))
                # Generated pairs are the paper's: nothing to compare, no time recorded.
                if any(c.form != "paper" for row in pairs for c in row):
                    comparing_s = (time.perf_counter() - start) / len(chunk)
                for i, row in zip(scored_here, pairs, strict=True):
                    compared[i] = row
                    plans[i] = plan_question(chunk[i], direct[i].answer,
                                             [o.answer for o in options[i]], row,
                                             is_blank=self._blank,
                                             skip_when_agree=self.config.skip_scoring_when_agree)
            for i, policy in enumerate(fixed):
                if policy is not None:
                    compared[i] = [whole("paper", direct[i].answer, o.answer, agree=False)
                                   for o in options[i]]
                    plans[i] = plan_unscored(chunk[i], _present(direct[i]),
                                             [_present(o) for o in options[i]], policy,
                                             is_blank=self._blank)
            ready = cast("list[Plan]", plans)
            to_score = [i for i, plan in enumerate(ready)
                        if plan.verdict is None and plan.fixed is None]
            scores: dict[int, list[ViewLikelihoods]] = {}
            scoring_s = 0.0
            if to_score:
                start = time.perf_counter()
                # Every question of the chunk, with all its candidates, in one session call:
                # the transformers fast path scores all answers of a prompt off one cache.
                rows = [(chunk[i], ready[i].items) for i in to_score]
                scores = score_rows(session, rows, to_score)
                scoring_s = (time.perf_counter() - start) / len(to_score)
        total = (time.perf_counter() - began) / len(chunk)
        out = []
        for i, prepared in enumerate(chunk):
            timings = Timings(generate_direct_s=direct[i].seconds,
                              generate_rag_s=rag[i].seconds,
                              comparing_s=comparing_s if fixed[i] is None else 0.0,
                              scoring_s=scoring_s if i in scores else 0.0, total_s=total)
            out.append(Evidence(prepared, direct[i], options[i], compared[i], ready[i],
                                scores.get(i), timings, self.backend.model_id, keep_prompts))
        return out

    def _sides(self, session: ModelSession, chunk: list[PreparedQuestion],
               fixed: list[Policy | None]
               ) -> tuple[list[Candidate], list[Candidate], list[list[Candidate]]]:
        """Each question's Direct candidate, pairwise RAG candidate and RAG-side options
        (:func:`~.candidates.rag_options`), the missing ones generated: both sides for a
        question to score; under a ``fixed`` policy, the kept side, and the other side only
        where settling needs it (no passage: Direct; the kept side blank: the other one,
        as any question with a blank answer is settled). A side not needed is ``absent``."""
        keep = [None if policy is None else policy.fixed_side for policy in fixed]
        direct = side_candidates(session, self.config, chunk, "direct",
                                 [k != "rag" or not p.has_evidence
                                  for k, p in zip(keep, chunk, strict=True)])
        rag = side_candidates(session, self.config, chunk, "rag",
                              [k != "direct" or self._blank(d.answer)
                               for k, d in zip(keep, direct, strict=True)])
        options = [rag_options(self.config, p, r) for p, r in zip(chunk, rag, strict=True)]
        # Always-RAG whose RAG side is blank: Direct is what settling keeps.
        late = [k == "rag" and d.absent and all(self._blank(o.answer) for o in opts)
                for k, d, opts in zip(keep, direct, options, strict=True)]
        if any(late):
            more = side_candidates(session, self.config, chunk, "direct", late)
            direct = [m if want else d for m, d, want in zip(more, direct, late, strict=True)]
        return direct, rag, options

    def _blank(self, answer: str) -> bool:
        """True when ``answer`` has nothing to score (blank, or no token)."""
        return is_blank_text(answer) or self.backend.count_tokens(answer) == 0


def _recordable(policy: Policy, field: str) -> Policy:
    """``policy`` if a Decision can record its numbers (within the config's bounds)."""
    for name in policy.numbers:
        try:
            check_rule_value(name, getattr(policy, name))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{field}.{name}", exc.problem, exc.fix) from None
    return policy


def _candidate_count(prepared: PreparedQuestion) -> int:
    """How many RAG candidates a question has (1 for a pairwise one)."""
    given = prepared.input.rag_candidates
    return 1 if given is None else len(given)


def _present(candidate: Candidate) -> str | None:
    """A candidate's text, None when it is ``absent`` (neither given nor generated)."""
    return None if candidate.absent else candidate.answer


def _listed(inputs: Any) -> list[Any]:
    """The batch as a list; anything that is not a collection of inputs is a typed error."""
    if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Iterable):
        raise InvalidInputError("inputs", f"must be a list of inputs, got a "
                                f"{type(inputs).__name__}",
                                "pass a list of {question, passages, ...} objects (wrap a "
                                "single input in a list, or call arbitrate)")
    return list(inputs)


def _config(config: TrustMarginConfig | Mapping[str, Any] | None) -> TrustMarginConfig | None:
    """``config`` checked (a dict of its fields is validated), None when not given."""
    if isinstance(config, Mapping):
        return TrustMarginConfig.model_validate(dict(config))
    if config is not None and not isinstance(config, TrustMarginConfig):
        raise InvalidInputError("config", f"a {type(config).__name__} is not a config",
                                "pass a TrustMarginConfig or a dict of its fields")
    return config
