"""Scoring backends: one protocol, several engines."""

from trustmargin_integrations.backends.base import (
    Backend,
    ContinuationRequest,
    ContinuationScore,
    JobResult,
    RenderedViews,
    ScoringJob,
    run_jobs_plain,
)

__all__ = [
    "Backend",
    "ContinuationRequest",
    "ContinuationScore",
    "JobResult",
    "RenderedViews",
    "ScoringJob",
    "run_jobs_plain",
]
