"""Training-free RAG pipelines used as candidate sources for TrustMargin.

Each pipeline answers a question with retrieval in its own way and returns a
:class:`PipelineResult`: the raw answer, the evidence it was conditioned on and the full
trace of retrievals, generations and decisions (``to_metadata()`` is its JSON form)::

    from trustmargin_integrations.pipelines import build_pipeline
    pipeline = build_pipeline("ircot", backend, index, k=3)
    result = pipeline.run("Who directed the film that won ...?")
    result.answer, result.passages, result.to_metadata()

Pipelines: ``ircot`` (IRCoT, any Backend), ``flare`` (FLARE-direct, HFBackend only),
``clehe`` (CLeHe entropy-based decoding, HFBackend only), ``dtr`` (DTR-RAG, any Backend).
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
