"""A project pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as a LlamaIndex query engine."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE, Response
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import QueryBundle

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.nodes import passage_to_node
from trustmargin_integrations.validation import check_question

__all__ = ["PIPELINE_METADATA_KEY", "PipelineQueryEngine"]

PIPELINE_METADATA_KEY = "pipeline"
"""The key of a pipeline's trace in :class:`PipelineQueryEngine`'s ``Response.metadata`` and
in the Decision's ``metadata``."""


class PipelineQueryEngine(BaseQueryEngine):
    """A project pipeline (IRCoT, FLARE, CLeHe-RAG, DTR-RAG) as a LlamaIndex query engine.

    The ``Response`` holds the pipeline's answer, the passages it was conditioned on as
    source nodes (:func:`passage_to_node`) and its whole trace under
    ``metadata["pipeline"]`` (``PipelineResult.to_metadata()``). Wrapped in
    :class:`TrustMarginQueryEngine`, the pipeline's answer is the RAG-side candidate and its
    trace lands in the Decision's ``metadata["pipeline"]``; pass
    ``evidence="retriever", retriever=index`` there to score it against the question's
    top-k passages, as the paper does, rather than against the passages it gathered.

    Args:
        pipeline: e.g. ``build_pipeline("ircot", tm.backend, index, k=3)``.
        callback_manager: LlamaIndex callbacks.
    """

    def __init__(self, pipeline: Any, callback_manager: CallbackManager | None = None) -> None:
        if not (isinstance(getattr(pipeline, "name", None), str)
                and callable(getattr(pipeline, "run", None))):
            raise InvalidInputError("pipeline", f"a {type(pipeline).__name__} is not a "
                                    "pipeline (it needs name and run(question))",
                                    "pass a pipeline from trustmargin_integrations.pipelines, "
                                    "e.g. build_pipeline('ircot', tm.backend, index, k=3)")
        self.pipeline = pipeline
        super().__init__(callback_manager)

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        question = check_question(query_bundle.query_str, "query")
        result = self.pipeline.run(question)
        return Response(response=result.answer,
                        source_nodes=[passage_to_node(p) for p in result.passages],
                        metadata={PIPELINE_METADATA_KEY: result.to_metadata()})

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return await asyncio.to_thread(self._query, query_bundle)
