"""The backend protocol shared by every engine (local transformers, OpenAI-compatible servers).

A backend renders prompts, counts tokens, generates greedily and returns teacher-forced
log-likelihoods of continuations. ``run_jobs`` is the one call the arbiter makes: it
generates the missing candidates and scores the six likelihoods for a batch of questions,
so an engine can share work between generation and scoring. :func:`run_jobs_plain` is the
straightforward implementation every backend can fall back to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

View = Literal["question_only", "question_context", "context_only"]
Candidate = Literal["direct", "rag"]
VIEWS: tuple[View, ...] = ("question_only", "question_context", "context_only")
CANDIDATES: tuple[Candidate, ...] = ("direct", "rag")


@dataclass(frozen=True)
class ContinuationRequest:
    """Score ``continuation`` after ``prompt``; both are tokenized separately, then joined."""

    prompt: str
    continuation: str


@dataclass(frozen=True)
class ContinuationScore:
    """Sum of the continuation's token log-probabilities and its token count."""

    logprob_sum: float
    num_tokens: int

    @property
    def mean(self) -> float:
        """Length-normalized log-likelihood (the paper's ``l(y)``)."""
        if self.num_tokens <= 0:
            raise ValueError("a continuation with no tokens has no normalized log-likelihood")
        return self.logprob_sum / self.num_tokens


@dataclass(frozen=True)
class RenderedViews:
    """The three prompts exactly as the model sees them (chat template applied)."""

    question_only: str
    question_context: str
    context_only: str

    def get(self, view: View) -> str:
        """The rendered prompt of ``view``."""
        return getattr(self, view)


@dataclass(frozen=True)
class ScoringJob:
    """One question for :meth:`Backend.run_jobs`; a ``None`` answer is generated."""

    views: RenderedViews
    direct_answer: str | None
    rag_answer: str | None


@dataclass
class JobResult:
    """Candidates (cleaned), raw generations and, when scored, the six likelihoods."""

    direct_answer: str
    rag_answer: str
    direct_raw: str | None = None
    rag_raw: str | None = None
    scores: dict[tuple[Candidate, View], ContinuationScore] | None = None
    generate_direct_s: float = 0.0
    generate_rag_s: float = 0.0
    scoring_s: float = 0.0
    extras: dict[str, float] = field(default_factory=dict)


AnswerCleaner = Callable[[str], str]
ScoringFilter = Callable[[str, str], bool]


@runtime_checkable
class Backend(Protocol):
    """What the arbiter needs from a language-model engine."""

    model_id: str

    def render_prompt(self, user_message: str) -> str:
        """Wrap a user message in the model's chat template (or return it unchanged)."""
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` without special tokens."""
        ...

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """The longest token prefix of ``text`` with at most ``max_tokens`` tokens, as text."""
        ...

    def answer_token_count(self, answer: str) -> int:
        """Tokens the answer has when scored (0 means it cannot be scored)."""
        ...

    def generate(self, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of rendered prompts (raw text, special tokens removed)."""
        ...

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Teacher-forced log-likelihood of each continuation (the reference semantics)."""
        ...

    def run_jobs(
        self,
        jobs: Sequence[ScoringJob],
        *,
        max_new_tokens: int,
        clean: AnswerCleaner,
        needs_scoring: ScoringFilter,
    ) -> list[JobResult]:
        """Generate missing candidates, then score the six likelihoods where needed."""
        ...


def scoring_requests(
    views: RenderedViews, direct: str, rag: str
) -> list[tuple[tuple[Candidate, View], ContinuationRequest]]:
    """The six (candidate, view) requests of one question, in a fixed order."""
    answers = {"direct": direct, "rag": rag}
    return [
        ((cand, view), ContinuationRequest(views.get(view), answers[cand]))
        for cand in CANDIDATES
        for view in VIEWS
    ]


def run_jobs_plain(
    backend: Backend,
    jobs: Sequence[ScoringJob],
    *,
    max_new_tokens: int,
    clean: AnswerCleaner,
    needs_scoring: ScoringFilter,
) -> list[JobResult]:
    """Reference ``run_jobs``: batched generation, then one scoring request per likelihood."""
    results = [JobResult(direct_answer=j.direct_answer or "", rag_answer=j.rag_answer or "")
               for j in jobs]
    for candidate in CANDIDATES:
        view: View = "question_only" if candidate == "direct" else "question_context"
        todo = [i for i, j in enumerate(jobs) if getattr(j, f"{candidate}_answer") is None]
        if not todo:
            continue
        start = time.perf_counter()
        raw = backend.generate([jobs[i].views.get(view) for i in todo], max_new_tokens)
        share = (time.perf_counter() - start) / len(todo)
        for i, text in zip(todo, raw, strict=True):
            setattr(results[i], f"{candidate}_raw", text)
            setattr(results[i], f"{candidate}_answer", clean(text))
            setattr(results[i], f"generate_{candidate}_s", share)
    to_score = [i for i, r in enumerate(results) if needs_scoring(r.direct_answer, r.rag_answer)]
    if to_score:
        start = time.perf_counter()
        keyed = [scoring_requests(jobs[i].views, results[i].direct_answer,
                                  results[i].rag_answer) for i in to_score]
        flat = [req for group in keyed for _, req in group]
        scores = backend.score_continuations(flat)
        share = (time.perf_counter() - start) / len(to_score)
        for n, i in enumerate(to_score):
            group = keyed[n]
            chunk = scores[n * len(group):(n + 1) * len(group)]
            results[i].scores = {key: s for (key, _), s in zip(group, chunk, strict=True)}
            results[i].scoring_s = share
    return results
