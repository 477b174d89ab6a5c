"""Local language models for LangChain on a TrustMargin backend: a plain LLM and a chat model.

Both decode greedily until the model's end-of-sequence token, a stop sequence or
``max_new_tokens``, and stream their tokens. They share the arbiter's model object
(``from_trustmargin``), so a chain runs offline with one copy of the weights. The paper's
first-line stop belongs to the arbiter's own candidates only; these models answer in full.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import LLM, BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult, GenerationChunk
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, field_validator

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.config import CHAT_MAX_NEW_TOKENS, CHAT_MAX_NEW_TOKENS_LIMIT
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.streaming import prompt_ids, stream_greedy
from trustmargin_integrations.validation import TypedFields

if TYPE_CHECKING:
    from trustmargin_integrations.guided import GuidedDecoder

# Schema-guided decoding (trustmargin_integrations.guided, .structured) is imported inside the
# structured-output and tool-call methods: a chain that only chats never loads it.

_ROLES = {HumanMessage: "user", AIMessage: "assistant", SystemMessage: "system"}


def _local_backend(value: Any) -> Any:
    """A backend that holds its model and tokenizer here (``HFBackend``)."""
    if not all(hasattr(value, name) for name in ("model", "tokenizer", "encode_prompt")):
        raise InvalidInputError("backend", f"a {type(value).__name__} has no local model and "
                                "tokenizer", "pass tm.backend of a local TrustMargin or "
                                "HFBackend.load(...)")
    return value


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
    def _model_id(self) -> str:
        """The loaded model's name, as traces and a per-call ``model`` check read it."""
        return str(getattr(self.backend, "model_id", "unknown"))

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_id": self._model_id,
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
        if isinstance(message, ToolMessage):
            # The result of a call, as the user turn that brings it back (a small model's
            # chat template has no tool role).
            turns.append({"role": "user", "content": f"Result of the tool call "
                          f"{message.name or message.tool_call_id}: {message.text}"})
            continue
        role = (message.role if isinstance(message, ChatMessage)
                else next((r for t, r in _ROLES.items() if isinstance(message, t)), None))
        if role not in ("system", "user", "assistant"):
            raise InvalidInputError(f"messages[{i}]", f"is a {type(message).__name__}, which "
                                    "a local chat model cannot take", "send system, human, ai "
                                    "and tool messages")
        content = message.text
        if isinstance(message, AIMessage) and message.tool_calls and not content:
            content = "\n".join(json.dumps({"name": c["name"], "arguments": c["args"]},
                                           ensure_ascii=False) for c in message.tool_calls)
        turns.append({"role": role, "content": content})
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

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """What LangSmith records of a call: the model, greedy decoding, the token budget."""
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "trustmargin"
        # A per-call `model` is what the caller asked for; a call naming another model than
        # the loaded one is refused (_same_model), so the trace never misattributes a call.
        params["ls_model_name"] = str(kwargs.get("model") or self._model_id)
        params["ls_temperature"] = 0.0
        params["ls_max_tokens"] = self.max_new_tokens
        return params

    # -- tools and structured output ---------------------------------------------------------

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
                   ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` (functions, ``BaseTool`` objects, pydantic classes or
        OpenAI tool dicts) offered in a system instruction.

        ``tool_choice``: ``None`` / ``"auto"`` lets the model answer or reply with a JSON call
        (a small model seldom does); ``"any"`` / ``"required"`` / ``True`` forces a call of the
        most likely tool, a tool's name forces that one: the call's arguments are then written
        by schema-guided decoding (see :mod:`.structured`) and come back as
        ``AIMessage.tool_calls``; ``"none"`` offers no tool. A ``ToolMessage`` in the
        conversation is passed back to the model as the call's result.
        """
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        names = [t["function"]["name"] for t in formatted]
        return self.bind(tools=formatted, tool_choice=_tool_choice(tool_choice, names),
                         **kwargs)

    def with_structured_output(self, schema: Any = None, *, include_raw: bool = False,
                               **kwargs: Any) -> Runnable[LanguageModelInput, Any]:
        """The model answering with one object of ``schema`` (a pydantic class, a TypedDict or
        a JSON schema), written by schema-guided decoding: the decoder writes the JSON and the
        model fills in each value (see :mod:`.structured`); the object is then validated.

        Returns the pydantic instance (a pydantic class) or the dict. A reply that does not
        fit the schema raises :class:`~.structured.StructuredOutputError` (an
        ``OutputParserException``) naming the place, the problem and the reply; with
        ``include_raw=True`` the result is ``{"raw": AIMessage, "parsed": ..., "parsing_error":
        ...}`` and nothing is raised.
        """
        if schema is None:
            raise InvalidInputError("schema", "is missing", "pass a pydantic class, a "
                                    "TypedDict or a JSON schema dict")
        from trustmargin_integrations.guided import StructuredOutputError, check, parse_free
        from trustmargin_integrations.langchain.structured import schema_of

        json_schema, validate = schema_of(schema)
        bound = self.bind(json_schema=json_schema, **kwargs)

        def parse(message: AIMessage) -> Any:
            reply = message.text
            return check(parse_free(reply, json_schema), json_schema, validate, reply)

        parser = RunnableLambda(parse, name="parse_structured_output")
        if not include_raw:
            return bound | parser

        def parsed(state: dict[str, Any]) -> dict[str, Any]:
            try:
                return {**state, "parsed": parse(state["raw"]), "parsing_error": None}
            except StructuredOutputError as exc:
                return {**state, "parsed": None, "parsing_error": exc}

        return RunnableParallel(raw=bound) | RunnableLambda(parsed, name="parse_or_error")

    def _decoder(self, root: Any) -> GuidedDecoder:
        from trustmargin_integrations.guided import local_decoder

        return local_decoder(self.backend, root, field="messages")

    def _special_turn(self, messages: list[BaseMessage], json_schema: Any, tools: Any,
                      tool_choice: Any) -> AIMessage:
        """A structured or tool-calling reply (the plain chat turn streams instead)."""
        from trustmargin_integrations.guided import instruction, structured_reply
        from trustmargin_integrations.langchain.structured import (
            parse_tool_call,
            tool_call,
            tools_instruction,
        )

        if json_schema is not None:
            rendered = render_messages(self.backend, [SystemMessage(instruction(json_schema)),
                                                      *messages])
            return AIMessage(content=structured_reply(self._decoder(json_schema), rendered,
                                                      json_schema, self.max_new_tokens))
        rendered = render_messages(self.backend, [SystemMessage(tools_instruction(tools)),
                                                  *messages])
        decoder = self._decoder({})
        if tool_choice is None:
            reply = decoder.generate(rendered, [], self.max_new_tokens)
            call = parse_tool_call(reply, tools)
            if call is None:
                return AIMessage(content=reply)
        else:
            call = tool_call(decoder, rendered, tools, None if tool_choice == "any"
                             else tool_choice)
        return AIMessage(content="", tool_calls=[{**call, "id": f"call_{uuid.uuid4().hex[:12]}",
                                                  "type": "tool_call"}])

    # -- generation --------------------------------------------------------------------------

    def _same_model(self, kwargs: dict[str, Any]) -> None:
        asked = kwargs.get("model")
        if asked is not None and asked != self._model_id:
            raise InvalidInputError("model", f"asks for {asked!r}, but this chat model runs "
                                    f"{self._model_id!r} in this process", "drop the per-call "
                                    "model, or build a LocalChatModel on that model's backend")

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                  ) -> ChatResult:
        self._same_model(kwargs)
        special = _special(kwargs)
        if special is not None:
            message = self._special_turn(messages, *special)
            return ChatResult(generations=[ChatGeneration(message=message)])
        text = "".join(chunk.text for chunk in self._stream(messages, stop, run_manager))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any
                ) -> Iterator[ChatGenerationChunk]:
        self._same_model(kwargs)
        special = _special(kwargs)
        if special is not None:
            # A tool call or a JSON object is decided whole: one chunk.
            message = self._special_turn(messages, *special)
            yield ChatGenerationChunk(message=AIMessageChunk(
                content=message.text, tool_call_chunks=[
                    {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"],
                     "index": i, "type": "tool_call_chunk"}
                    for i, c in enumerate(message.tool_calls)]))
            return
        rendered = render_messages(self.backend, messages)
        for piece in self._pieces(rendered, stop, "messages"):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


def _special(kwargs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """``(json_schema, tools, tool_choice)`` when a call asks for structured output or offers
    tools (bound by with_structured_output / bind_tools); None for a plain chat turn."""
    json_schema, tools = kwargs.get("json_schema"), kwargs.get("tools")
    tool_choice = kwargs.get("tool_choice")
    if json_schema is None and (not tools or tool_choice == "none"):
        return None
    return json_schema, tools, tool_choice


def _tool_choice(value: Any, names: list[str]) -> str | None:
    """``tool_choice`` as None (the model may call), ``"any"`` (it must call one), a tool's
    name (it must call that one) or ``"none"``."""
    if value in (None, "auto", False):
        return None
    if value in ("any", "required", True):
        return "any"
    if isinstance(value, dict):
        value = (value.get("function") or {}).get("name", value.get("name"))
    if value == "none" or value in names:
        return str(value)
    raise InvalidInputError("tool_choice", f"is {value!r}, not one of the tools {names}",
                            "pass 'auto', 'any', 'none' or a bound tool's name")
