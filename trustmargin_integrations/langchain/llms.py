"""Local language models for LangChain on a TrustMargin backend: a plain LLM and a chat model.

Both decode greedily until the model's end-of-sequence token, a stop sequence or
``max_new_tokens``, and stream their tokens. They share the arbiter's model object
(``from_trustmargin``), so a chain runs offline with one copy of the weights. The paper's
first-line stop belongs to the arbiter's own candidates only; these models answer in full.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LLM, BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, GenerationChunk
from pydantic import BaseModel, ConfigDict, Field, field_validator

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_NEW_TOKENS_LIMIT
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.validation import TypedFields

_ROLES = {HumanMessage: "user", AIMessage: "assistant", SystemMessage: "system"}


def _local_backend(value: Any) -> Any:
    """A backend that holds its model and tokenizer here (``HFBackend``)."""
    if not all(hasattr(value, name) for name in ("model", "tokenizer", "encode_prompt")):
        raise InvalidInputError("backend", f"a {type(value).__name__} has no local model and "
                                "tokenizer", "pass tm.backend of a local TrustMargin or "
                                "HFBackend.load(...)")
    return value


def prompt_ids(backend: Any, rendered: str, max_new_tokens: int, field: str
               ) -> tuple[list[int], int]:
    """The rendered prompt's token ids and the new-token budget that fits the model's window.

    A prompt that leaves no room to answer is refused before any model call (a prompt of
    tens of thousands of tokens would otherwise spend minutes in prefill and then fail).
    """
    ids = backend.encode_prompt(rendered)
    window = getattr(backend, "context_window", None)
    if isinstance(window, int) and len(ids) >= window:
        raise InvalidInputError(field, f"is {len(ids)} tokens, more than the model's "
                                f"{window}-token window", "shorten it: fewer or shorter "
                                "documents in the context, or a model with a longer window")
    room = max_new_tokens if window is None else min(max_new_tokens, window - len(ids))
    return ids, room


def stream_greedy(backend: Any, ids: list[int], max_new_tokens: int,
                  stop: Sequence[str] | None = None) -> Iterator[str]:
    """Greedy decoding of ``ids`` as text pieces, until EOS, a stop sequence (left out of the
    text) or ``max_new_tokens``: a chat answer runs on past its first line (the first-line
    stop belongs to the paper's candidates only).

    Drives the backend's public token-level decoding (``greedy_tokens``, which takes the
    model's lock per forward pass, never across a yield, so an abandoned or async stream
    never holds the model).
    """
    stops = [s for s in stop or [] if s]
    # Text that could still become a stop sequence is held back until it cannot.
    hold = max((len(s) for s in stops), default=1) - 1
    generated: list[int] = []
    sent, text = 0, ""
    for token in backend.greedy_tokens(ids, max_new_tokens):
        if token in backend.eos_token_ids:
            break
        generated.append(token)
        text = backend.decode_tokens(generated)
        cut = min((i for i in (text.find(s) for s in stops) if i != -1), default=-1)
        if cut != -1:
            yield text[sent:cut]
            return
        # An incomplete multi-byte character decodes as U+FFFD: wait for the next token.
        ready = len(text) - hold if not text.endswith("\ufffd") else sent
        if ready > sent:
            yield text[sent:ready]
            sent = ready
    if len(text) > sent:
        yield text[sent:]


class _LocalModel(TypedFields, BaseModel):
    """What both models share: the backend, the budget, greedy streaming of a prompt (a
    pydantic model, so both LangChain classes get the same fields and validation)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(description="A local Backend, e.g. tm.backend or HFBackend.load().")
    max_new_tokens: int = Field(CHAT_MAX_NEW_TOKENS, ge=1, le=CHAT_MAX_NEW_TOKENS_LIMIT,
                                description="Most new tokens per answer (greedy).")

    @field_validator("backend")
    @classmethod
    def _has_local_model(cls, value: Any) -> Any:
        return _local_backend(value)

    @classmethod
    def from_trustmargin(cls, tm: TrustMargin, **kwargs: Any) -> Any:
        """Share the arbiter's model (no second copy in memory)."""
        if not isinstance(tm, TrustMargin):
            raise InvalidInputError("tm", f"a {type(tm).__name__} is not a TrustMargin",
                                    "pass TrustMargin.from_pretrained()")
        return cls(backend=tm.backend, **kwargs)

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": getattr(self.backend, "model_id", "unknown"),
                "max_new_tokens": self.max_new_tokens}

    def _pieces(self, rendered: str, stop: list[str] | None, field: str) -> Iterator[str]:
        ids, room = prompt_ids(self.backend, rendered, self.max_new_tokens, field)
        return stream_greedy(self.backend, ids, room, stop)


class LocalLLM(_LocalModel, LLM):
    """A LangChain LLM on a local TrustMargin backend (greedy decoding, chat template on).

    Each prompt is sent as one user message through the backend's chat template, so
    ``PromptTemplate.from_template(QUESTION_ONLY_TEMPLATE) | LocalLLM(...)`` answers as the
    core's generation does, but in full: it stops at the end-of-sequence token, a ``stop``
    sequence or ``max_new_tokens`` (default 256), never at the first line break. ``stream``
    yields the answer as it is decoded. A prompt longer than the model's window raises
    ``InvalidInputError`` (field ``prompt``) before any model call.
    """

    @property
    def _llm_type(self) -> str:
        return "trustmargin-local"

    def _call(self, prompt: str, stop: list[str] | None = None,
              run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> str:
        return "".join(chunk.text for chunk in self._stream(prompt, stop, run_manager))

    def _stream(self, prompt: str, stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                ) -> Iterator[GenerationChunk]:
        for piece in self._pieces(self.backend.render_prompt(prompt), stop, "prompt"):
            if run_manager is not None:
                run_manager.on_llm_new_token(piece)
            yield GenerationChunk(text=piece)


def render_messages(backend: Any, messages: Sequence[BaseMessage]) -> str:
    """The messages in the model's chat template, ending where the assistant answers.

    Roles: system, human (user), ai (assistant) and ``ChatMessage`` with one of those roles.
    A model without a chat template gets ``Role: text`` lines and ``Assistant:``.
    """
    turns = []
    for i, message in enumerate(messages):
        role = (message.role if isinstance(message, ChatMessage)
                else next((r for t, r in _ROLES.items() if isinstance(message, t)), None))
        if role not in ("system", "user", "assistant"):
            raise InvalidInputError(f"messages[{i}]", f"is a {type(message).__name__}, which "
                                    "a local chat model cannot take", "send system, human and "
                                    "ai messages (tool calls are not supported)")
        turns.append({"role": role, "content": message.text})
    if not getattr(backend.tokenizer, "chat_template", None):
        lines = [f"{t['role'].capitalize()}: {t['content']}" for t in turns]
        return "\n".join([*lines, "Assistant:"])
    return str(backend.tokenizer.apply_chat_template(turns, tokenize=False,
                                                     add_generation_prompt=True))


class LocalChatModel(_LocalModel, BaseChatModel):
    """A LangChain chat model on a local TrustMargin backend.

    Messages are rendered with the model's own chat template (:func:`render_messages`), so a
    ``ChatPromptTemplate`` reaches the model as system and user turns, not as flattened
    ``System: ... Human: ...`` text. Greedy decoding until end of sequence, a ``stop``
    sequence or ``max_new_tokens`` (default 256); ``stream`` yields message chunks. A
    conversation longer than the model's window raises ``InvalidInputError`` (field
    ``messages``) before any model call.

    Example:
        >>> chat = LocalChatModel.from_trustmargin(tm)  # doctest: +SKIP
        >>> chat.invoke([("system", "Be brief."), ("human", "Name a bridge.")]).content
        ... # doctest: +SKIP
    """

    @property
    def _llm_type(self) -> str:
        return "trustmargin-local-chat"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                  ) -> ChatResult:
        text = "".join(chunk.text for chunk in self._stream(messages, stop, run_manager))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                ) -> Iterator[ChatGenerationChunk]:
        rendered = render_messages(self.backend, messages)
        for piece in self._pieces(rendered, stop, "messages"):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
