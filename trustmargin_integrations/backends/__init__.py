"""Scoring backends: one protocol, several engines."""

from trustmargin_integrations.backends.base import (
    Backend,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    PlainSession,
    StopPredicate,
    TokenDecoder,
    plain_session,
)

__all__ = [
    "Backend",
    "ContinuationRequest",
    "ContinuationScore",
    "ModelSession",
    "PlainSession",
    "StopPredicate",
    "TokenDecoder",
    "plain_session",
]
