"""A LlamaIndex chat LLM on a local TrustMargin backend (the embedded model, or any HF model).

It generates like a chat model does: greedily, until the model's end of turn or
``max_new_tokens``, token by token when streamed. The paper's first-line stop belongs to the
arbiter's own short-answer candidates, never to text a user's engine asked for.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar

from llama_index.core.base.llms.generic_utils import messages_to_prompt as generic_messages
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from pydantic import ConfigDict, Field

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_NEW_TOKENS_LIMIT
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.arbiter import check_arbiter
from trustmargin_integrations.validation import TypedFields

__all__ = ["LocalLlamaIndexLLM"]

_T = TypeVar("_T")


def _generate_until_eos(backend: Any, prompt: str, max_new_tokens: int,
                        streamer: Any = None) -> str:
    """Greedy generation of ``prompt`` (already rendered) until EOS or ``max_new_tokens``
    (a chat answer runs past its first line): the one place that drives the model directly.

    transformers' own ``generate`` is used here rather than the backend's ``greedy`` because
    it drives LlamaIndex's token streamer; it runs under the backend's public lock (one model,
    one forward pass at a time) with the backend's end-of-turn and padding ids.
    """
    import torch
    from transformers import GenerationConfig

    ids = torch.tensor([backend.encode_prompt(prompt)], device=backend.device)
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False,
                              eos_token_id=sorted(backend.eos_token_ids),
                              pad_token_id=backend.pad_token_id)
    with backend.lock, torch.inference_mode():
        out = backend.model.generate(ids, attention_mask=torch.ones_like(ids),
                                     generation_config=config, streamer=streamer)
    return str(backend.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True))


async def _in_thread(items: Iterator[_T]) -> AsyncIterator[_T]:
    """An iterator whose every step blocks, consumed from a worker thread per item."""
    done = object()
    while (item := await asyncio.to_thread(next, items, done)) is not done:
        yield item  # type: ignore[misc]


class LocalLlamaIndexLLM(TypedFields, CustomLLM):
    """A LlamaIndex chat LLM on a local TrustMargin backend (greedy, the model's chat template).

    - ``complete(prompt)`` sends ``prompt`` as one user message through the model's chat
      template; ``chat(messages)`` renders the whole conversation with it
      (``metadata.is_chat_model`` is True, so LlamaIndex's prompts arrive as messages).
    - Generation runs until the model ends its turn or ``max_new_tokens``;
      ``stream_complete`` / ``stream_chat`` yield token by token.
    - A prompt that does not fit the model's context window (``backend.context_window``, else
      ``context_window``) is refused with an :class:`InvalidInputError` before any prefill;
      when it fits but leaves less room than ``max_new_tokens``, fewer tokens are generated.

    The async methods run in worker threads, so the event loop (and other coroutines, such
    as the inner engine and the closed-book call of ``TrustMarginQueryEngine.aquery``) keeps
    running; the backend serializes model calls itself.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(CHAT_MAX_NEW_TOKENS, ge=1, le=CHAT_MAX_NEW_TOKENS_LIMIT,
                                description="Most tokens per answer.")
    context_window: int = Field(2048, ge=16, description="Prompt budget LlamaIndex packs to.")

    def __init__(self, **kwargs: Any) -> None:
        # Checked before pydantic runs: it would wrap a validator's typed error in its own.
        backend = kwargs.get("backend")
        if backend is not None and not all(hasattr(backend, name) for name in (
                "model", "tokenizer", "encode_prompt")):
            raise InvalidInputError("backend", f"a {type(backend).__name__} holds no local "
                                    "model", "pass an HFBackend, e.g. tm.backend of "
                                    "TrustMargin.from_pretrained()")
        super().__init__(**kwargs)

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> LocalLlamaIndexLLM:
        """Share the arbiter's model (no second copy in memory)."""
        check_arbiter(tm)
        kwargs.setdefault("context_window", tm.config.max_context_tokens)
        return cls(backend=tm.backend, **kwargs)

    @property
    def metadata(self) -> LLMMetadata:
        """Sizes LlamaIndex uses to pack context into prompts; a chat model."""
        return LLMMetadata(context_window=self.context_window, num_output=self.max_new_tokens,
                           model_name=getattr(self.backend, "model_id", "unknown"),
                           is_chat_model=True)

    # -- prompts and the window --------------------------------------------------------------

    def render_messages(self, messages: Sequence[ChatMessage]) -> str:
        """The conversation in the model's chat template, ready for the assistant's turn."""
        tokenizer = self.backend.tokenizer
        if not getattr(tokenizer, "chat_template", None):
            return generic_messages(messages)
        turns = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)

    def _render(self, prompt: str, formatted: bool) -> str:
        # ``formatted`` prompts come from render_messages (or a caller who rendered them).
        return prompt if formatted else self.backend.render_prompt(prompt)

    def _new_tokens(self, rendered: str) -> int:
        """Tokens left to generate after ``rendered``; refuses a prompt over the window."""
        window = self.backend.context_window or self.context_window
        used = len(self.backend.encode_prompt(rendered))
        if used >= window:
            raise InvalidInputError(
                "prompt", f"has {used} tokens, more than the model's context window of "
                f"{window}", "shorten it (LlamaIndex engines pack retrieved text to "
                "LocalLlamaIndexLLM.context_window; pass long documents through a retriever)")
        return min(self.max_new_tokens, window - used)

    # -- generation ----------------------------------------------------------------------------

    def _generate(self, rendered: str) -> str:
        return _generate_until_eos(self.backend, rendered, self._new_tokens(rendered))

    def _stream(self, rendered: str) -> Iterator[str]:
        """Deltas of the answer, token by token; the window is checked here, at the call,
        and the model generates in its own thread."""
        from transformers import TextIteratorStreamer

        new_tokens = self._new_tokens(rendered)
        streamer = TextIteratorStreamer(self.backend.tokenizer, skip_prompt=True,
                                        skip_special_tokens=True)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                _generate_until_eos(self.backend, rendered, new_tokens, streamer)
            except BaseException as exc:  # re-raised in the consumer's thread
                failure.append(exc)
                streamer.end()

        worker = threading.Thread(target=run, daemon=True)
        worker.start()

        def deltas() -> Iterator[str]:
            yield from (piece for piece in streamer if piece)
            worker.join()
            if failure:
                raise failure[0]

        return deltas()

    @staticmethod
    def _completions(deltas: Iterator[str]) -> CompletionResponseGen:
        text = ""
        for delta in deltas:
            text += delta
            yield CompletionResponse(text=text, delta=delta)

    @staticmethod
    def _chat_responses(deltas: Iterator[str]) -> ChatResponseGen:
        text = ""
        for delta in deltas:
            text += delta
            yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text),
                               delta=delta)

    # -- LlamaIndex's LLM interface ------------------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                 ) -> CompletionResponse:
        """Greedy completion of ``prompt`` (one user message, unless ``formatted``)."""
        return CompletionResponse(text=self._generate(self._render(prompt, formatted)))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponseGen:
        """:meth:`complete`, token by token."""
        return self._completions(self._stream(self._render(prompt, formatted)))

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The assistant's reply to ``messages`` (rendered with the model's chat template)."""
        text = self._generate(self.render_messages(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """:meth:`chat`, token by token."""
        return self._chat_responses(self._stream(self.render_messages(messages)))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any
                        ) -> CompletionResponse:
        """:meth:`complete` in a worker thread."""
        rendered = self._render(prompt, formatted)
        return CompletionResponse(text=await asyncio.to_thread(self._generate, rendered))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any
                               ) -> CompletionResponseAsyncGen:
        """:meth:`stream_complete`, each token awaited from a worker thread."""
        return _in_thread(self._completions(self._stream(self._render(prompt, formatted))))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """:meth:`chat` in a worker thread."""
        text = await asyncio.to_thread(self._generate, self.render_messages(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any
                           ) -> ChatResponseAsyncGen:
        """:meth:`stream_chat`, each token awaited from a worker thread."""
        return _in_thread(self._chat_responses(self._stream(self.render_messages(messages))))
