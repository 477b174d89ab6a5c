"""IRCoT: retrieval interleaved with chain-of-thought reasoning (Trivedi et al., 2023).

Retrieve ``k`` passages with the question; then, up to ``max_steps`` times, generate the
next reasoning sentence from few-shot exemplars + the passages gathered so far + the
question + the reasoning so far. A sentence holding the answer marker ends the loop and its
tail is the answer; any other sentence is the query of ``k`` more passages. Without an
answer at the step limit (or after an empty sentence), a reader answers with the paper's
question+context prompt over the gathered passages.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trustmargin_integrations.answers import answer_complete
from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.pipelines.base import (
    BasePipeline,
    PipelineResult,
    PipelineStep,
    check_int,
    dedupe,
    refs,
    register,
)
from trustmargin_integrations.prompts import join_passages
from trustmargin_integrations.retrieval.base import Retriever
from trustmargin_integrations.schema import Passage
from trustmargin_integrations.sentences import first_sentence

ANSWER_MARKER = "So the answer is:"
# Accept the marker's common variants ("The answer is:", any case): a small model often
# drops the "So"; anything after the colon is the answer.
_MARKER = re.compile(r"answer is\s*:", re.IGNORECASE)

# Original exemplars written for this package (fictional facts, so that the model cannot
# answer them from memory and must follow the passages). Each is (passages, question,
# reasoning); two compositional questions and one comparison, as in 2WikiMultihopQA.
EXEMPLARS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("Lake Verin: Lake Verin is a glacial lake in the Aldmoor Valley. The nearest town "
         "is Corvale.",
         "Corvale: Corvale is a market town founded in 1642 by the merchant Edith Marrow."),
        "Who founded the town nearest to Lake Verin?",
        "The town nearest to Lake Verin is Corvale. Corvale was founded by Edith Marrow. "
        f"{ANSWER_MARKER} Edith Marrow.",
    ),
    (
        ("The Silent Harbour: The Silent Harbour is a 1958 drama film directed by Anselm "
         "Roth.",
         "Night Over Tessaly: Night Over Tessaly is a 1964 war film directed by Clara Voss."),
        "Which film came out first, The Silent Harbour or Night Over Tessaly?",
        "The Silent Harbour came out in 1958. Night Over Tessaly came out in 1964. 1958 is "
        f"earlier than 1964. {ANSWER_MARKER} The Silent Harbour.",
    ),
    (
        ("Pieter Dalsgaard: Pieter Dalsgaard (1901-1977) was a Danish painter and the father "
         "of the composer Ida Dalsgaard.",
         "Ida Dalsgaard: Ida Dalsgaard (1930-2011) was a Danish composer born in Aarhus."),
        "Where was the daughter of Pieter Dalsgaard born?",
        "The daughter of Pieter Dalsgaard is Ida Dalsgaard. Ida Dalsgaard was born in Aarhus. "
        f"{ANSWER_MARKER} Aarhus.",
    ),
)

INSTRUCTION = (
    "Answer the question by reasoning step by step over the passages, one short sentence "
    f'per step. End with "{ANSWER_MARKER}" followed by a short answer phrase.'
)


def _block(passages: str, question: str, reasoning: str = "") -> str:
    return f"Passages:\n{passages}\n\nQuestion: {question}\nReasoning:{' ' if reasoning else ''}" \
           f"{reasoning}"


def cot_message(question: str, context: str) -> str:
    """The IRCoT user message: instruction, exemplars, the gathered passages, the question.

    The reasoning so far is not part of it: it continues the assistant's turn.
    """
    shots = [_block(join_passages(list(ps)), q, r) for ps, q, r in EXEMPLARS]
    return "\n\n".join([INSTRUCTION, *shots, _block(context, question)])


def marker_answer(sentence: str) -> str | None:
    """The text after the answer marker in ``sentence`` (None without a marker)."""
    match = _MARKER.search(sentence)
    return None if match is None else sentence[match.end():].strip()


@dataclass
class _State:
    question: str
    passages: list[Passage] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    steps: list[PipelineStep] = field(default_factory=list)
    answer: str | None = None
    evidence: list[Passage] = field(default_factory=list)
    done: bool = False
    stop: str = "step limit"


@register
class IRCoTPipeline(BasePipeline):
    """IRCoT (Trivedi et al., 2023) over any Backend and Retriever.

    Args:
        backend: the language model (any Backend).
        retriever: anything with ``search(query, k)``.
        k: passages retrieved per query (the question, then each reasoning sentence).
        max_steps: most reasoning sentences per question.
        max_passages: most passages gathered (deduplicated by id; later ones are dropped).
        sentence_max_new_tokens: generation length of one reasoning step (its first
            sentence is kept).
        max_new_tokens: generation length of the fallback reader's answer.
        max_context_tokens: token budget of the passage context in a prompt.
        batch_size: questions whose model calls are batched together.
    """

    name = "ircot"

    def __init__(self, backend: Backend, retriever: Retriever, *, k: int = 3,
                 max_steps: int = 4, max_passages: int = 9, sentence_max_new_tokens: int = 48,
                 max_new_tokens: int = 20, max_context_tokens: int = 2048,
                 batch_size: int = 8) -> None:
        super().__init__(backend, retriever)
        self.k = check_int("k", k, 1)
        self.max_steps = check_int("max_steps", max_steps, 1)
        self.max_passages = check_int("max_passages", max_passages, 1)
        self.sentence_max_new_tokens = check_int("sentence_max_new_tokens",
                                                 sentence_max_new_tokens, 1)
        self.max_new_tokens = check_int("max_new_tokens", max_new_tokens, 1)
        self.max_context_tokens = check_int("max_context_tokens", max_context_tokens, 16)
        self.chunk_size = check_int("batch_size", batch_size, 1)

    def params(self) -> dict[str, Any]:
        """Every parameter in force."""
        return {"k": self.k, "max_steps": self.max_steps, "max_passages": self.max_passages,
                "sentence_max_new_tokens": self.sentence_max_new_tokens,
                "max_new_tokens": self.max_new_tokens,
                "max_context_tokens": self.max_context_tokens, "batch_size": self.chunk_size,
                "answer_marker": ANSWER_MARKER, "exemplars": len(EXEMPLARS)}

    def _run_chunk(self, questions: list[str]) -> list[PipelineResult]:
        start = time.perf_counter()
        states = [_State(q) for q in questions]
        self._gather(states, questions)
        for _ in range(self.max_steps):
            active = [s for s in states if not s.done]
            if not active:
                break
            prompts = [self._cot_prompt(s) for s in active]
            outputs = self.backend.generate(prompts, self.sentence_max_new_tokens,
                                            stop=answer_complete)
            searching: list[_State] = []
            for state, raw in zip(active, outputs, strict=True):
                sentence = first_sentence(raw)
                answer = marker_answer(sentence)
                state.steps.append(PipelineStep(
                    "reason", text=sentence, passages=refs(state.evidence),
                    extra={"raw": raw, "step": len(state.reasoning) + 1,
                           "marker": answer is not None}))
                if not sentence:
                    state.done, state.stop = True, "empty reasoning sentence"
                    continue
                state.reasoning.append(sentence)
                if answer:
                    state.answer, state.done, state.stop = answer, True, "answer marker"
                elif answer is not None:
                    # An empty answer after the marker is no answer: the reader answers.
                    state.done, state.stop = True, "nothing after the answer marker"
                else:
                    searching.append(state)
            self._gather(searching, [s.reasoning[-1] for s in searching])
        self._read([s for s in states if s.answer is None])
        share = (time.perf_counter() - start) / len(states)
        return [self._result(s.question, s.answer or "", s.steps, s.evidence,
                             bool(s.evidence), share) for s in states]

    def _gather(self, states: Sequence[_State], queries: list[str]) -> None:
        """Retrieve ``k`` passages per query and add the new ones (up to the cap)."""
        for state, query, hits in zip(states, queries, self._search(queries, self.k),
                                      strict=True):
            known = {p.id for p in state.passages}
            room = self.max_passages - len(state.passages)
            added = [p for p in dedupe(hits) if p.id not in known][:max(room, 0)]
            state.passages.extend(added)
            state.steps.append(PipelineStep(
                "retrieve", query=query, passages=refs(hits),
                extra={"added": [p.id for p in added], "gathered": len(state.passages)}))

    def _cot_prompt(self, state: _State) -> str:
        """The rendered CoT prompt with the reasoning so far continuing the answer turn."""
        reserve = self.sentence_max_new_tokens * (self.max_steps + 1)
        prompt, state.evidence = self._prompt_over_fitting(state.question, state.passages,
                                                           reserve, cot_message)
        return prompt + " ".join(state.reasoning)

    def _read(self, states: list[_State]) -> None:
        """Answer with the paper's question+context prompt over the gathered passages."""
        if not states:
            return
        prompts = []
        for state in states:
            prompt, state.evidence = self._prompt_over_fitting(state.question, state.passages,
                                                               self.max_new_tokens)
            prompts.append(prompt)
        for state, raw in zip(states, self.backend.generate(prompts, self.max_new_tokens,
                                                            stop=answer_complete),
                              strict=True):
            state.answer = raw
            state.steps.append(PipelineStep("read", text=raw, passages=refs(state.evidence),
                                            extra={"reason": state.stop}))


__all__ = ["ANSWER_MARKER", "EXEMPLARS", "IRCoTPipeline", "cot_message", "marker_answer"]
