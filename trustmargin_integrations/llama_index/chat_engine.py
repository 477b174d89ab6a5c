"""The chat-engine wrapper: a LlamaIndex ``ContextChatEngine`` or
``CondensePlusContextChatEngine``, arbitrated turn by turn.

The RAG side is the user's engine; the closed-book side is the same chat without retrieval
(the engine's LLM, system prompt and history; why not an empty retriever:
docs/decisions.md). The engine's memory keeps the *kept* answer.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.base.response.schema import Response
from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore
from llama_index.core.types import Thread

from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.llama_index.arbiter import (
    METADATA_KEY,
    TrustMarginArbiter,
    dispatcher,
)
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.sides import chosen_side
from trustmargin_integrations.validation import check_question
from trustmargin_integrations.vocabulary import Side

__all__ = ["CHAT_ENGINES", "StreamingChatResponse", "TrustMarginChatCorrectionEvent",
           "TrustMarginChatEngine"]

CHAT_ENGINES = (ContextChatEngine, CondensePlusContextChatEngine)
"""The chat engines :class:`TrustMarginChatEngine` wraps: both retrieve for every turn and
answer with one LLM, so the closed-book side is that LLM without the retrieved context."""


class TrustMarginChatCorrectionEvent(BaseEvent):
    """Dispatched when a ``live`` stream showed one side and the decision kept the other:
    ``side`` is the kept side, ``answer`` its text (now the turn's answer in the memory)."""

    side: str
    answer: str
    decision: Decision

    @classmethod
    def class_name(cls) -> str:
        """Event name, as LlamaIndex handlers see it."""
        return "TrustMarginChatCorrectionEvent"


@dataclass
class StreamingChatResponse(StreamingAgentChatResponse):
    """LlamaIndex's streaming chat response with the ``metadata`` its plain chat response has
    (``metadata["trustmargin"]``: the Decision; after a ``live`` stream, set when it ends)."""

    metadata: dict[str, Any] | None = None


@dataclass
class _Turn:
    """One user turn: the message, the memory before it and the closed-book messages."""

    message: str
    history: list[ChatMessage]  # the whole memory before the turn
    closed_book: list[ChatMessage]  # system prompt + the history the engine sends + message


@dataclass
class _Side:
    """One side's complete answer: its text, its streamed pieces, its source nodes."""

    text: str
    pieces: list[str]
    nodes: list[NodeWithScore]


def _deltas(pieces: Sequence[str]) -> Generator[ChatResponse, None, None]:
    text = ""
    for piece in pieces:
        text += piece
        yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text),
                           delta=piece)


async def _adeltas(pieces: Sequence[str]) -> AsyncGenerator[ChatResponse, None]:
    for response in _deltas(pieces):
        yield response


class TrustMarginChatEngine(BaseChatEngine):
    """A ``ContextChatEngine`` / ``CondensePlusContextChatEngine`` arbitrated per turn.

    Each turn runs the engine (the RAG answer and its source nodes) and, concurrently, the
    engine's LLM closed-book (the same system prompt and history, no retrieved context); the
    :class:`TrustMarginArbiter` keeps one answer, which the turn returns (``response``,
    ``source_nodes`` of the kept side, ``metadata["trustmargin"]`` the Decision) and which
    the engine's memory keeps. Each decision is dispatched as a
    :class:`~trustmargin_integrations.llama_index.TrustMarginDecisionEvent`. The question
    scored is the user's message.

    Streaming (``stream_chat`` / ``astream_chat``): both sides are generated, then the kept
    side's tokens are streamed in the pieces that side generated. With ``live="rag"`` (or
    ``"direct"``) that side's tokens stream as they are generated while the other side runs
    beside it; when the decision keeps the other side, a
    :class:`TrustMarginChatCorrectionEvent` is dispatched, the memory holds the kept answer
    and ``response.metadata["trustmargin"]`` (filled when the stream ends) says so.

    A policy that cannot change the answer (always-RAG, always-Direct: ``Policy.fixed_side``)
    runs only the kept side, exactly as the plain engine (or its LLM) would, and scores
    nothing: the response carries no Decision.

    Args:
        chat_engine: the engine, e.g. ``index.as_chat_engine(chat_mode="context")``.
        tm: the arbiter (its model scores both answers).
        live: stream this side as it is generated (see above).
        include_prompts: attach rendered prompts to the Decision (None: ``tm.config``).
        policy: who decides (None: ``tm.config``'s policy).
    """

    def __init__(self, chat_engine: BaseChatEngine, tm: TrustMargin, *,
                 live: Side | None = None, include_prompts: bool | None = None,
                 policy: Policy | None = None) -> None:
        if not isinstance(chat_engine, CHAT_ENGINES):
            raise InvalidInputError("chat_engine", f"is a {type(chat_engine).__name__}",
                                    "pass a ContextChatEngine or CondensePlusContextChatEngine "
                                    "(index.as_chat_engine(chat_mode='context' or "
                                    "'condense_plus_context'))")
        if live is not None and live not in ("rag", "direct"):
            raise InvalidInputError("live", f"is {live!r}",
                                    "pass live='rag' or 'direct', or None")
        self.chat_engine = chat_engine
        self.arbiter = TrustMarginArbiter(tm, include_prompts=include_prompts, policy=policy)
        self.live = live

    # -- the engine's parts ------------------------------------------------------------------

    @property
    def tm(self) -> TrustMargin:
        """The arbiter."""
        return self.arbiter.tm

    @property
    def llm(self) -> LLM:
        """The engine's LLM: it answers both sides."""
        return self.chat_engine._llm  # the engines keep no public handle

    @property
    def _memory(self) -> Any:
        return self.chat_engine._memory

    def _system(self) -> list[ChatMessage]:
        engine = self.chat_engine
        if isinstance(engine, ContextChatEngine):
            return list(engine._prefix_messages)
        prompt = engine._system_prompt
        return ([] if not prompt else
                [ChatMessage(role=self.llm.metadata.system_role, content=prompt)])

    @property
    def fixed_side(self) -> Side | None:
        """The side the policy keeps whatever the margins (run alone, unscored), or None."""
        return (self.arbiter.policy or self.tm.config.decision_policy).fixed_side

    def _turn(self, message: str, chat_history: list[ChatMessage] | None) -> _Turn:
        check_question(message, "message")
        if chat_history is not None:
            self._memory.set(chat_history)
        history = list(self._memory.get_all())
        sent = list(self._memory.get(input=message))
        user = ChatMessage(role=MessageRole.USER, content=message)
        return _Turn(message, history, [*self._system(), *sent, user])

    def _keep(self, turn: _Turn, answer: str) -> None:
        """The memory after the turn: what it held, the message and the kept answer."""
        self._memory.set([*turn.history, ChatMessage(role=MessageRole.USER, content=turn.message),
                          ChatMessage(role=MessageRole.ASSISTANT, content=answer)])

    # -- the two sides -----------------------------------------------------------------------

    def _rag(self, turn: _Turn, streamed: bool) -> _Side:
        if not streamed:
            response = self.chat_engine.chat(turn.message)
            return _Side(response.response, [response.response], list(response.source_nodes))
        stream = self.chat_engine.stream_chat(turn.message)
        pieces = [p for p in stream.response_gen if p]
        return _Side("".join(pieces), pieces, list(stream.source_nodes))

    def _direct(self, turn: _Turn, streamed: bool) -> _Side:
        if not streamed:
            text = self.llm.chat(turn.closed_book).message.content or ""
            return _Side(text, [text], [])
        pieces = [r.delta for r in self.llm.stream_chat(turn.closed_book) if r.delta]
        return _Side("".join(pieces), pieces, [])

    async def _arag(self, turn: _Turn, streamed: bool) -> _Side:
        if not streamed:
            response = await self.chat_engine.achat(turn.message)
            return _Side(response.response, [response.response], list(response.source_nodes))
        stream = await self.chat_engine.astream_chat(turn.message)
        pieces = [p async for p in stream.async_response_gen() if p]
        return _Side("".join(pieces), pieces, list(stream.source_nodes))

    async def _adirect(self, turn: _Turn, streamed: bool) -> _Side:
        if not streamed:
            text = (await self.llm.achat(turn.closed_book)).message.content or ""
            return _Side(text, [text], [])
        pieces = [r.delta async for r in await self.llm.astream_chat(turn.closed_book)
                  if r.delta]
        return _Side("".join(pieces), pieces, [])

    def _both(self, turn: _Turn, streamed: bool) -> dict[Side, _Side]:
        # Each side in a worker thread and a copy of this context (LlamaIndex's spans nest
        # under this turn); a local model serializes its passes, a remote one serves both.
        with ThreadPoolExecutor(max_workers=2) as pool:
            rag = pool.submit(contextvars.copy_context().run, self._rag, turn, streamed)
            direct = pool.submit(contextvars.copy_context().run, self._direct, turn, streamed)
            return {"rag": rag.result(), "direct": direct.result()}

    # -- the decision ------------------------------------------------------------------------

    def _decided(self, turn: _Turn, sides: dict[Side, _Side], decision: Response
                 ) -> tuple[Decision, _Side]:
        record = (decision.metadata or {})[METADATA_KEY]
        kept = sides[chosen_side(record.decision)]
        self._keep(turn, kept.text)
        return record.decision, kept

    def _decide(self, turn: _Turn, sides: dict[Side, _Side]) -> tuple[Response, _Side]:
        result = self.arbiter.arbitrate(turn.message, sides["direct"].text,
                                        Response(sides["rag"].text, sides["rag"].nodes))
        return result, self._decided(turn, sides, result)[1]

    async def _adecide(self, turn: _Turn, sides: dict[Side, _Side]) -> tuple[Response, _Side]:
        result = await self.arbiter.aarbitrate(turn.message, sides["direct"].text,
                                               Response(sides["rag"].text, sides["rag"].nodes))
        return result, self._decided(turn, sides, result)[1]

    @staticmethod
    def _answer(result: Response, kept: _Side) -> AgentChatResponse:
        return AgentChatResponse(response=kept.text, source_nodes=list(result.source_nodes),
                                 metadata=dict(result.metadata or {}))

    @staticmethod
    def _streamed(result: Response, kept: _Side) -> StreamingAgentChatResponse:
        return StreamingChatResponse(
            chat_stream=_deltas(kept.pieces), source_nodes=list(result.source_nodes),
            is_writing_to_memory=False, metadata=dict(result.metadata or {}))

    def _correct(self, live: Side, result: Response, response: StreamingChatResponse
                 ) -> None:
        """After a live stream: the Decision into the response, a correction event when the
        other side is kept."""
        record = (result.metadata or {})[METADATA_KEY]
        response.metadata = {**(response.metadata or {}), **(result.metadata or {})}
        side = chosen_side(record.decision)
        if side != live:
            response.source_nodes = list(result.source_nodes)
            dispatcher.event(TrustMarginChatCorrectionEvent(
                side=side, answer=record.decision.answer, decision=record.decision))

    # -- a fixed side: the plain engine, or its LLM closed-book ------------------------------

    def _direct_only(self, turn: _Turn) -> AgentChatResponse:
        text = self._direct(turn, streamed=False).text
        self._keep(turn, text)
        return AgentChatResponse(response=text)

    def _direct_stream(self, turn: _Turn) -> StreamingAgentChatResponse:
        """The LLM's closed-book stream, written to the memory as the engine writes its own."""
        self._memory.put(ChatMessage(role=MessageRole.USER, content=turn.message))
        response = StreamingAgentChatResponse(chat_stream=self.llm.stream_chat(turn.closed_book))
        thread = Thread(target=response.write_response_to_history, args=(self._memory,))
        response.write_response_to_history_thread = thread
        thread.start()
        return response

    # -- chat --------------------------------------------------------------------------------

    @dispatcher.span
    def chat(self, message: str, chat_history: list[ChatMessage] | None = None,
             **kwargs: Any) -> AgentChatResponse:
        """One turn, arbitrated (see the class docstring)."""
        turn = self._turn(message, chat_history)
        fixed = self.fixed_side
        if fixed == "rag":
            return self.chat_engine.chat(message)
        if fixed == "direct":
            return self._direct_only(turn)
        result, kept = self._decide(turn, self._both(turn, streamed=False))
        return self._answer(result, kept)

    @dispatcher.span
    def stream_chat(self, message: str, chat_history: list[ChatMessage] | None = None,
                    **kwargs: Any) -> StreamingAgentChatResponse:
        """One turn, streamed (see the class docstring for when tokens come)."""
        turn = self._turn(message, chat_history)
        fixed = self.fixed_side
        if fixed == "rag":
            return self.chat_engine.stream_chat(message)
        if fixed == "direct":
            return self._direct_stream(turn)
        if self.live is not None:
            return self._live(turn, self.live)
        result, kept = self._decide(turn, self._both(turn, streamed=True))
        return self._streamed(result, kept)

    def _live(self, turn: _Turn, live: Side) -> StreamingAgentChatResponse:
        other: Side = "direct" if live == "rag" else "rag"
        run: dict[Side, Callable[[_Turn, bool], _Side]] = {"rag": self._rag,
                                                           "direct": self._direct}
        response = StreamingChatResponse(is_writing_to_memory=False)
        pool = ThreadPoolExecutor(max_workers=1)
        pending = pool.submit(contextvars.copy_context().run, run[other], turn, False)

        def stream() -> Generator[ChatResponse, None, None]:
            pieces: list[str] = []
            nodes: list[NodeWithScore] = []
            try:
                if live == "rag":
                    source = self.chat_engine.stream_chat(turn.message)
                    response.source_nodes = nodes = list(source.source_nodes)
                    for piece in source.response_gen:
                        if piece:
                            pieces.append(piece)
                            yield ChatResponse(message=ChatMessage(
                                role=MessageRole.ASSISTANT, content="".join(pieces)),
                                delta=piece)
                else:
                    for chunk in self.llm.stream_chat(turn.closed_book):
                        if chunk.delta:
                            pieces.append(chunk.delta)
                            yield ChatResponse(message=chunk.message, delta=chunk.delta)
                sides = {live: _Side("".join(pieces), pieces, nodes), other: pending.result()}
                result, _ = self._decide(turn, sides)
                self._correct(live, result, response)
            finally:
                pool.shutdown(wait=False)

        response.chat_stream = stream()
        return response

    # -- async -------------------------------------------------------------------------------

    @dispatcher.span
    async def achat(self, message: str, chat_history: list[ChatMessage] | None = None,
                    **kwargs: Any) -> AgentChatResponse:
        """Async :meth:`chat`: both sides awaited concurrently."""
        turn = self._turn(message, chat_history)
        fixed = self.fixed_side
        if fixed == "rag":
            return await self.chat_engine.achat(message)
        if fixed == "direct":
            text = (await self._adirect(turn, streamed=False)).text
            self._keep(turn, text)
            return AgentChatResponse(response=text)
        rag, direct = await asyncio.gather(self._arag(turn, False), self._adirect(turn, False))
        result, kept = await self._adecide(turn, {"rag": rag, "direct": direct})
        return self._answer(result, kept)

    @dispatcher.span
    async def astream_chat(self, message: str, chat_history: list[ChatMessage] | None = None,
                           **kwargs: Any) -> StreamingAgentChatResponse:
        """Async :meth:`stream_chat`."""
        turn = self._turn(message, chat_history)
        fixed = self.fixed_side
        if fixed == "rag":
            return await self.chat_engine.astream_chat(message)
        if fixed == "direct":
            await self._memory.aput(ChatMessage(role=MessageRole.USER, content=message))
            response = StreamingAgentChatResponse(
                achat_stream=await self.llm.astream_chat(turn.closed_book))
            response.awrite_response_to_history_task = asyncio.create_task(
                response.awrite_response_to_history(self._memory))
            return response
        if self.live is not None:
            return self._alive(turn, self.live)
        rag, direct = await asyncio.gather(self._arag(turn, True), self._adirect(turn, True))
        result, kept = await self._adecide(turn, {"rag": rag, "direct": direct})
        return StreamingChatResponse(
            achat_stream=_adeltas(kept.pieces), source_nodes=list(result.source_nodes),
            is_writing_to_memory=False, metadata=dict(result.metadata or {}))

    def _alive(self, turn: _Turn, live: Side) -> StreamingAgentChatResponse:
        other: Side = "direct" if live == "rag" else "rag"
        response = StreamingChatResponse(is_writing_to_memory=False)

        async def stream() -> AsyncGenerator[ChatResponse, None]:
            pending = asyncio.ensure_future(
                self._arag(turn, False) if other == "rag" else self._adirect(turn, False))
            pieces: list[str] = []
            nodes: list[NodeWithScore] = []
            if live == "rag":
                source = await self.chat_engine.astream_chat(turn.message)
                response.source_nodes = nodes = list(source.source_nodes)
                async for piece in source.async_response_gen():
                    if piece:
                        pieces.append(piece)
                        yield ChatResponse(message=ChatMessage(
                            role=MessageRole.ASSISTANT, content="".join(pieces)), delta=piece)
            else:
                async for chunk in await self.llm.astream_chat(turn.closed_book):
                    if chunk.delta:
                        pieces.append(chunk.delta)
                        yield ChatResponse(message=chunk.message, delta=chunk.delta)
            sides = {live: _Side("".join(pieces), pieces, nodes), other: await pending}
            result, _ = await self._adecide(turn, sides)
            self._correct(live, result, response)

        response.achat_stream = stream()
        return response

    # -- memory ------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation (the engine's memory)."""
        self.chat_engine.reset()

    @property
    def chat_history(self) -> list[ChatMessage]:
        """The conversation: every user message and the answer kept for it."""
        return self.chat_engine.chat_history
