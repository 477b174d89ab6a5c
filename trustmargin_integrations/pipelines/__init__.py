"""Training-free RAG pipelines used as candidate sources for TrustMargin.

    from trustmargin_integrations.pipelines import build_pipeline
    result = build_pipeline("ircot", backend, index, k=3).run("Who directed ...?")
    result.answer, result.passages, result.to_metadata()

Pipelines: ``ircot`` and ``dtr`` (any Backend), ``flare`` and ``clehe`` (HFBackend only).
"""

from trustmargin_integrations.pipelines.base import (
    PIPELINES,
    Pipeline,
    PipelineResult,
    PipelineStep,
    build_pipeline,
)
from trustmargin_integrations.pipelines.clehe import CLeHePipeline
from trustmargin_integrations.pipelines.dtr import DTRPipeline, rrf_merge
from trustmargin_integrations.pipelines.flare import FLAREPipeline
from trustmargin_integrations.pipelines.ircot import IRCoTPipeline

__all__ = [
    "PIPELINES",
    "CLeHePipeline",
    "DTRPipeline",
    "FLAREPipeline",
    "IRCoTPipeline",
    "Pipeline",
    "PipelineResult",
    "PipelineStep",
    "build_pipeline",
    "rrf_merge",
]
