"""Scoring backends: one protocol, several engines."""

from trustmargin_integrations.backends.base import (
    Backend,
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    EngineDefaults,
    ModelSession,
    PlainSession,
    StopPredicate,
    TokenDecoder,
    plain_session,
)

__all__ = [
    "Backend",
    "Capabilities",
    "ContinuationRequest",
    "ContinuationScore",
    "EngineDefaults",
    "ModelSession",
    "PlainSession",
    "StopPredicate",
    "TokenDecoder",
    "plain_session",
]
