"""Long work states its plan first: how many questions and batches, and how long they take.

:func:`require_consent` (before any model loads): more than :data:`LARGE_RUN_QUESTIONS`
questions need ``--yes`` or ``--limit N``, and a run that cannot ask is refused.
:func:`probe_plan` (once the model is loaded) times the first batch as a probe, keeping its
work, and prints the questions, batches and time left. Why: docs/decisions.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.evaluation.datasets import EvalExample
from trustmargin_integrations.evaluation.runner import PassageSource, run_eval
from trustmargin_integrations.store import ResultStore

LARGE_RUN_QUESTIONS = 1_000
"""Questions above which a run asks first: at the embedded model's pace on a laptop CPU
(about 4-5 s a question) 1,000 questions are over an hour of work."""


def require_consent(questions: int, *, yes: bool, limited: bool, interactive: bool) -> bool:
    """Whether the run must ask before its work (True: a large run at a terminal).

    Args:
        questions: the questions the run would answer.
        yes: ``--yes`` was given.
        limited: ``--limit`` was given (its size is the user's choice).
        interactive: a person can answer a question (stdin is a terminal).

    Raises:
        InvalidInputError: a large run without ``--yes`` or ``--limit`` that cannot ask.
    """
    if questions <= LARGE_RUN_QUESTIONS or yes or limited:
        return False
    if not interactive:
        raise InvalidInputError("--yes", f"{questions:,} questions is more than the "
                                f"{LARGE_RUN_QUESTIONS:,} a run answers without asking, and "
                                "this run cannot ask (its input is not a terminal)",
                                f"pass --yes to answer all {questions:,}, or --limit N to "
                                "answer the first N (a later run resumes from the cache)")
    return True


@dataclass(frozen=True)
class Plan:
    """What a probe measured: the run's size and the probe batch's time."""

    questions: int
    batch_size: int
    probe_questions: int
    probe_computed: int
    probe_s: float

    @property
    def batches(self) -> int:
        """Model calls of ``batch_size`` questions the run makes in all."""
        return math.ceil(self.questions / self.batch_size)

    @property
    def rest_s(self) -> float | None:
        """Seconds the questions after the probe take at its pace (None: the probe computed
        nothing, it was in the cache)."""
        if self.probe_computed == 0:
            return None
        return self.probe_s / self.probe_computed * (self.questions - self.probe_questions)

    def line(self) -> str:
        """The plan as one line."""
        head = (f"plan: {self.questions:,} questions in {self.batches:,} batch(es) of "
                f"{self.batch_size}")
        rest = self.rest_s
        if rest is None:
            return (f"{head}; the first batch was in the run's cache (resumed), so the "
                    "progress bar gives the time of the rest")
        if self.questions == self.probe_questions:
            return f"{head}; answered and scored in {self.probe_s:.1f} s"
        return (f"{head}; the first batch took {self.probe_s:.1f} s ({self.probe_computed} "
                f"answered and scored), so about {duration(rest)} for the other "
                f"{self.questions - self.probe_questions:,} (less for those already in the "
                "run's cache)")


def duration(seconds: float) -> str:
    """``42 s``, ``12 min``, ``13.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def probe_plan(tm: TrustMargin, examples: Sequence[EvalExample], store: ResultStore, *,
               source: PassageSource, top_k: int, batch_size: int) -> Plan:
    """Answer and score the first batch of ``examples`` into ``store`` (a later run of all
    of them reads it from there) and time it."""
    first = list(examples[:batch_size])
    began = time.monotonic()
    records = run_eval(tm, first, store, source=source, top_k=top_k, batch_size=batch_size,
                       progress=False)
    return Plan(len(examples), batch_size, len(first), sum(r.computed for r in records),
                time.monotonic() - began)
