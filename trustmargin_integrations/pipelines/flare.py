"""FLARE-direct: active retrieval triggered by low token probabilities (Jiang et al., 2023).

Retrieve ``k`` passages with the question; then, sentence by sentence (at most
``max_steps``), generate a look-ahead sentence and, if any of its tokens has probability below
``theta``, search again with the question plus the sentence (tokens below ``mask_threshold``
masked out), replace the passages and regenerate it. Decoding and probabilities go through
:class:`~trustmargin_integrations.backends.base.TokenDecoder`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.pipelines.base import (
    BasePipeline,
    PipelineResult,
    PipelineStep,
    check_float,
    check_int,
    dedupe,
    refs,
    register,
    require_token_decoder,
)
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.sentences import ends_sentence


@dataclass(frozen=True)
class Sentence:
    """A greedily decoded sentence: its token ids and why decoding stopped.

    ``stop`` is ``"sentence"`` (sentence end), ``"line"`` (a line break after text; the
    answer line is complete), ``"eos"`` or ``"limit"`` (``max_new_tokens`` reached).
    """

    ids: list[int]
    stop: str


@register
class FLAREPipeline(BasePipeline):
    """FLARE-direct (Jiang et al., 2023) on a local transformers model.

    Args:
        backend: a :class:`~trustmargin_integrations.backends.base.TokenDecoder` such as
            :class:`~trustmargin_integrations.backends.hf.HFBackend` (token probabilities are
            read off the model).
        retriever: anything with ``search(query, k)``.
        k: passages per retrieval (the paper's BM25-RAG depth by default).
        max_steps: most sentences per answer.
        theta: retrieval is triggered when any token of the look-ahead sentence has a
            probability below it (0.4 by default, FLARE's confidence threshold), in (0, 1).
        mask_threshold: tokens below this probability are masked out of the query
            (FLARE's beta); None means ``theta``. In (0, 1).
        sentence_max_new_tokens: most tokens of one sentence.
        max_context_tokens: token budget of the passage context.
    """

    name = "flare"

    def __init__(self, backend: Backend, retriever: Retriever, *, k: int = 20,
                 max_steps: int = 3, theta: float = 0.4, mask_threshold: float | None = None,
                 sentence_max_new_tokens: int = 20, max_context_tokens: int = 2048) -> None:
        super().__init__(backend, retriever)
        self.hf = require_token_decoder(backend, "flare", "the token probabilities")
        self.k = check_int("k", k, 1)
        self.max_steps = check_int("max_steps", max_steps, 1)
        self.theta = check_float("theta", theta, 0.0, 1.0)
        self.mask_threshold = (self.theta if mask_threshold is None
                               else check_float("mask_threshold", mask_threshold, 0.0, 1.0))
        self.sentence_max_new_tokens = check_int("sentence_max_new_tokens",
                                                 sentence_max_new_tokens, 1)
        self.max_context_tokens = check_int("max_context_tokens", max_context_tokens, 16)

    def params(self) -> dict[str, Any]:
        """Every parameter in force."""
        return {"k": self.k, "max_steps": self.max_steps, "theta": self.theta,
                "mask_threshold": self.mask_threshold,
                "sentence_max_new_tokens": self.sentence_max_new_tokens,
                "max_context_tokens": self.max_context_tokens, "query": "masked"}

    def _run_chunk(self, questions: list[str]) -> list[PipelineResult]:
        return [self._run_one(q) for q in questions]

    def _run_one(self, question: str) -> PipelineResult:
        start = time.perf_counter()
        steps: list[PipelineStep] = []
        passages = self._retrieve(question, question, steps, masked=[])
        answer: list[int] = []
        evidence: list[Passage] = []
        for step in range(1, self.max_steps + 1):
            prompt, used = self._prompt(question, passages)
            sentence = self._sentence(prompt + answer)
            if not sentence.ids:
                steps.append(PipelineStep("generate", text="", passages=refs(used),
                                          extra={"step": step, "role": "look-ahead",
                                                 "ids": [], "stop": sentence.stop}))
                break
            probs = self._probabilities(prompt + answer, sentence.ids)
            pieces = [self.hf.decode_tokens([t]) for t in sentence.ids]
            low = min(probs)
            steps.append(PipelineStep(
                "generate", text=self.hf.decode_tokens(sentence.ids), passages=refs(used),
                extra={"step": step, "role": "look-ahead", "tokens": pieces, "ids": sentence.ids,
                       "probs": probs, "min_prob": low, "stop": sentence.stop}))
            retrieve = low < self.theta
            masked = {i for i, p in enumerate(probs) if p < self.mask_threshold}
            steps.append(PipelineStep("decide", extra={
                "step": step, "retrieve": retrieve, "min_prob": low, "theta": self.theta}))
            if retrieve:
                kept = "".join(t for i, t in enumerate(pieces) if i not in masked).strip()
                query = f"{question} {kept}".strip()
                passages = self._retrieve(query, question, steps,
                                          masked=[pieces[i] for i in sorted(masked)])
                prompt, used = self._prompt(question, passages)
                sentence = self._sentence(prompt + answer)
                steps.append(PipelineStep(
                    "generate", text=self.hf.decode_tokens(sentence.ids), passages=refs(used),
                    extra={"step": step, "role": "regenerated", "ids": sentence.ids,
                           "stop": sentence.stop}))
            answer.extend(sentence.ids)
            evidence = dedupe([*evidence, *used])
            if sentence.stop in ("eos", "line") or not sentence.ids:
                break
        return self._result(question, self.hf.decode_tokens(answer), steps, evidence,
                            bool(evidence), time.perf_counter() - start)

    def _retrieve(self, query: str, question: str, steps: list[PipelineStep],
                  masked: list[str]) -> list[Passage]:
        hits = self._search([query], self.k)[0]
        steps.append(PipelineStep("retrieve", query=query, passages=refs(hits),
                                  extra={"masked_tokens": masked,
                                         "initial": query == question and not masked}))
        return hits

    def _prompt(self, question: str, passages: list[Passage]) -> tuple[list[int], list[Passage]]:
        """The paper's question+context prompt over the passages that fit, as token ids."""
        prompt, used = self._prompt_over_fitting(question, passages,
                                                 self.sentence_max_new_tokens * self.max_steps)
        return self.hf.encode_prompt(prompt), used

    def _sentence(self, prefix: list[int]) -> Sentence:
        """Greedy decoding of the next sentence after ``prefix`` (token ids), with a KV cache.

        A sentence ends when the text so far ends with sentence punctuation and the next
        token starts with whitespace (so "3.5" or "U.S. Navy" are not cut); that next token
        and a line-break token after text are not part of the sentence. The rule looks at the
        token before keeping it, so it reads the greedy tokens one by one instead of giving
        ``greedy`` a stop predicate (which keeps the token that satisfies it).
        """
        hf = self.hf
        ids: list[int] = []
        text = ""
        for token in hf.greedy_tokens(prefix, self.sentence_max_new_tokens):
            if token in hf.eos_token_ids:
                return Sentence(ids, "eos")
            piece = hf.decode_tokens([token])
            if text.strip() and ("\n" in piece or "\r" in piece):
                return Sentence(ids, "line")
            if text.strip() and piece[:1].isspace() and ends_sentence(text.rstrip()):
                return Sentence(ids, "sentence")
            ids.append(token)
            text = hf.decode_tokens(ids)
        return Sentence(ids, "limit")

    def _probabilities(self, prefix: list[int], sentence: list[int]) -> list[float]:
        """Probability of each sentence token after ``prefix`` (one plain forward pass)."""
        return self.hf.token_probabilities(prefix, sentence)
