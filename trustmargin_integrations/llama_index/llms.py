"""A LlamaIndex LLM on a local TrustMargin backend (the embedded model, or any HF model)."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.llms.types import (
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.backends.base import Backend

__all__ = ["LocalLLM"]


class LocalLLM(CustomLLM):
    """A LlamaIndex LLM on a local TrustMargin backend (greedy, chat template applied).

    The prompt is sent as one user message through the backend's chat template, so a
    query engine built on it answers with the same model the arbiter scores with. The async
    methods generate in a worker thread, so the event loop (and other coroutines, such as
    the inner engine and the closed-book call of ``TrustMarginQueryEngine.aquery``) keeps
    running; the backend serializes model calls itself.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(20, ge=1, le=512, description="Greedy generation length.")
    context_window: int = Field(2048, ge=16, description="Prompt budget LlamaIndex packs to.")

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> LocalLLM:
        """Share the arbiter's model (no second copy in memory)."""
        kwargs.setdefault("max_new_tokens", tm.config.max_new_tokens)
        kwargs.setdefault("context_window", tm.config.max_context_tokens)
        return cls(backend=tm.backend, **kwargs)

    @property
    def metadata(self) -> LLMMetadata:
        """Sizes LlamaIndex uses to pack context into prompts."""
        return LLMMetadata(context_window=self.context_window, num_output=self.max_new_tokens,
                           model_name=getattr(self.backend, "model_id", "unknown"),
                           is_chat_model=False)

    def _generate(self, prompt: str) -> str:
        backend: Backend = self.backend
        return backend.generate([backend.render_prompt(prompt)], self.max_new_tokens)[0]

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        """Greedy completion of ``prompt`` (sent as one chat user message)."""
        return CompletionResponse(text=self._generate(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        """One chunk: the whole completion (the backend has no token streaming)."""
        text = self._generate(prompt)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        """:meth:`complete` in a worker thread."""
        return CompletionResponse(text=await asyncio.to_thread(self._generate, prompt))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        """:meth:`stream_complete` in a worker thread: one chunk, the whole completion."""
        text = await asyncio.to_thread(self._generate, prompt)

        async def gen() -> CompletionResponseAsyncGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()
