"""DTR-RAG: decide whether to retrieve, then retrieve along two paths (Chen et al., 2026).

The Direct answer is returned without retrieval when its mean token NLL under the
question-only prompt is at most ``threshold``; otherwise ``k`` passages for the question and
``k`` for a pseudo-passage the model writes are merged by reciprocal rank fusion, deduplicated
by id and cut to ``k``, and the question+context prompt answers over them. Why RRF and not a
score merge: docs/decisions.md.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import Backend, ContinuationRequest
from trustmargin_integrations.pipelines.base import (
    BasePipeline,
    PipelineResult,
    PipelineStep,
    check_float,
    check_int,
    refs,
    register,
)
from trustmargin_integrations.prompts import view_texts
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Passage

RRF_CONSTANT = 60

PSEUDO_PASSAGE_TEMPLATE = (
    "Write a short encyclopedia passage, two or three sentences, that answers the question.\n"
    "\n"
    "Question:\n"
    "{question}\n"
    "\n"
    "Passage:"
)


def rrf_merge(rankings: Sequence[Sequence[Passage]], k: int,
              constant: int = RRF_CONSTANT) -> list[Passage]:
    """Reciprocal rank fusion of ranked lists, deduplicated by id, cut to ``k``.

    A passage scores ``sum over lists of 1 / (constant + rank)`` (rank 1 = best; within a
    list only its first occurrence counts). Equal scores keep first-seen order (the first
    list before the second). Each returned passage carries its fused score.
    """
    fused: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, passage in enumerate(ranking, start=1):
            if passage.id in seen:
                continue
            seen.add(passage.id)
            first.setdefault(passage.id, passage)
            fused[passage.id] = fused.get(passage.id, 0.0) + 1.0 / (constant + rank)
    order = sorted(first, key=lambda pid: -fused[pid])  # stable: ties keep first-seen order
    return [first[pid].model_copy(update={"score": fused[pid]}) for pid in order[:k]]


@register
class DTRPipeline(BasePipeline):
    """DTR-RAG (Chen et al., 2026) over any Backend and Retriever.

    Args:
        backend: the language model (any Backend).
        retriever: anything with ``search(query, k)``.
        k: passages per retrieval path and in the merged list (the paper's BM25-RAG depth).
        threshold: retrieve when the Direct answer's mean NLL (nats per token) exceeds it
            (0.5 by default: a mean token probability below about 0.61); any finite number,
            a negative one always retrieves. An empty Direct answer always retrieves.
        max_new_tokens: generation length of the Direct and the final answer.
        pseudo_max_new_tokens: generation length of the pseudo-passage.
        rrf_constant: the RRF rank offset (60, as in Cormack et al., 2009).
        max_context_tokens: token budget of the passage context.
        batch_size: questions whose model calls are batched together.
    """

    name = "dtr"

    def __init__(self, backend: Backend, retriever: Retriever, *, k: int = 20,
                 threshold: float = 0.5, max_new_tokens: int = 20,
                 pseudo_max_new_tokens: int = 96, rrf_constant: int = RRF_CONSTANT,
                 max_context_tokens: int = 2048, batch_size: int = 8) -> None:
        super().__init__(backend, retriever)
        self.k = check_int("k", k, 1)
        self.threshold = check_float("threshold", threshold)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
        self.pseudo_max_new_tokens = check_int("pseudo_max_new_tokens", pseudo_max_new_tokens, 1)
        self.rrf_constant = check_int("rrf_constant", rrf_constant, 0)
        self.max_context_tokens = check_int("max_context_tokens", max_context_tokens, 16)
        self.chunk_size = check_int("batch_size", batch_size, 1)

    def params(self) -> dict[str, Any]:
        """Every parameter in force."""
        return {"k": self.k, "threshold": self.threshold, "max_new_tokens": self.max_new_tokens,
                "pseudo_max_new_tokens": self.pseudo_max_new_tokens,
                "rrf_constant": self.rrf_constant, "max_context_tokens": self.max_context_tokens,
                "batch_size": self.chunk_size, "uncertainty": "mean token NLL of Direct"}

    def _run_chunk(self, questions: list[str]) -> list[PipelineResult]:
        start = time.perf_counter()
        render = self.backend.render_prompt
        q_only = [render(view_texts(q, "").question_only) for q in questions]
        directs = self.backend.generate(q_only, self.max_new_tokens, stop=answer_complete)
        scores = self.backend.score_continuations(
            [ContinuationRequest(p, d.strip()) for p, d in zip(q_only, directs, strict=True)])
        steps: list[list[PipelineStep]] = []
        retrieve: list[int] = []
        for i, (direct, score) in enumerate(zip(directs, scores, strict=True)):
            nll = -score.mean if score.num_tokens else float("inf")
            go = nll > self.threshold
            steps.append([
                PipelineStep("generate", text=direct, extra={"role": "direct"}),
                PipelineStep("decide", extra={"nll": nll, "num_tokens": score.num_tokens,
                                              "threshold": self.threshold, "retrieve": go}),
            ])
            if go:
                retrieve.append(i)
        answers = list(directs)
        evidence: list[list[Passage]] = [[] for _ in questions]
        if retrieve:
            self._retrieve_and_answer([questions[i] for i in retrieve],
                                      [steps[i] for i in retrieve], answers, evidence, retrieve)
        share = (time.perf_counter() - start) / len(questions)
        return [self._result(q, answers[i], steps[i], evidence[i], bool(evidence[i]), share)
                for i, q in enumerate(questions)]

    def _retrieve_and_answer(self, questions: list[str], steps: list[list[PipelineStep]],
                             answers: list[str], evidence: list[list[Passage]],
                             where: list[int]) -> None:
        render = self.backend.render_prompt
        pseudo = self.backend.generate(
            [render(PSEUDO_PASSAGE_TEMPLATE.format(question=q)) for q in questions],
            self.pseudo_max_new_tokens, stop=answer_complete)
        by_question = self._search(questions, self.k)
        # A blank pseudo-passage is no query: that question keeps its one path.
        usable = [i for i, p in enumerate(pseudo) if p.strip()]
        by_pseudo_hits = self._search([pseudo[i].strip() for i in usable], self.k)
        by_pseudo: list[list[Passage]] = [[] for _ in questions]
        for i, hits in zip(usable, by_pseudo_hits, strict=True):
            by_pseudo[i] = hits
        prompts = []
        for n, q in enumerate(questions):
            merged = rrf_merge([by_question[n], by_pseudo[n]], self.k, self.rrf_constant)
            prompt, used = self._prompt_over_fitting(q, merged, self.max_new_tokens)
            evidence[where[n]] = used
            steps[n].extend([
                PipelineStep("generate", text=pseudo[n], extra={"role": "pseudo-passage"}),
                PipelineStep("retrieve", query=q, passages=refs(by_question[n]),
                             extra={"path": "question"}),
                PipelineStep("retrieve", query=pseudo[n].strip() or None,
                             passages=refs(by_pseudo[n]), extra={"path": "pseudo-passage"}),
                PipelineStep("decide", passages=refs(merged), extra={
                    "merge": "rrf", "rrf_constant": self.rrf_constant, "kept": len(merged)}),
            ])
            prompts.append(prompt)
        for n, raw in enumerate(self.backend.generate(prompts, self.max_new_tokens,
                                                       stop=answer_complete)):
            answers[where[n]] = raw
            steps[n].append(PipelineStep("generate", text=raw, passages=refs(evidence[where[n]]),
                                         extra={"role": "rag"}))
