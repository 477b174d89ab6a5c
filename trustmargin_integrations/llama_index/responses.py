"""LlamaIndex response types: reading a whole answer from any of them, and answering in the
type the caller's engine used."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    PydanticResponse,
    Response,
    StreamingResponse,
)

from trustmargin_integrations.errors import InvalidInputError

__all__ = ["arecord", "aresolve", "like", "record", "resolve", "response_text"]


def resolve(value: Any, field: str) -> Any:
    """A streamed or structured response as a plain ``Response`` (other values unchanged)."""
    if isinstance(value, (StreamingResponse, PydanticResponse)):
        return value.get_response()
    if isinstance(value, AsyncStreamingResponse):
        raise InvalidInputError(field, "is an AsyncStreamingResponse",
                                "use the async method (aarbitrate)")
    return value


async def aresolve(value: Any, field: str) -> Any:
    """:func:`resolve`, consuming an ``AsyncStreamingResponse`` too."""
    if isinstance(value, AsyncStreamingResponse):
        return await value.get_response()
    return resolve(value, field)


def record(value: Any, field: str) -> tuple[Any, list[str] | None]:
    """:func:`resolve`, keeping the pieces a ``StreamingResponse`` streamed (None for a
    response that was not streamed), so the kept answer can be streamed again as it came."""
    if isinstance(value, StreamingResponse) and value.response_txt is None:
        pieces = [piece for piece in value.response_gen if piece]
        value.response_txt = "".join(pieces)
        return Response(value.response_txt, value.source_nodes, value.metadata), pieces
    return resolve(value, field), None


async def arecord(value: Any, field: str) -> tuple[Any, list[str] | None]:
    """:func:`record`, consuming an ``AsyncStreamingResponse`` too."""
    if isinstance(value, AsyncStreamingResponse) and value.response_txt is None:
        pieces = [piece async for piece in value.async_response_gen() if piece]
        return Response(value.response_txt, value.source_nodes, value.metadata), pieces
    return record(value, field)


async def _replay(pieces: list[str]) -> AsyncGenerator[str, None]:
    for piece in pieces:
        yield piece


def like(inner: Any, result: Response, pieces: list[str] | None = None) -> RESPONSE_TYPE:
    """``result`` in the inner engine's response type, so a streaming caller keeps working.

    Arbitration needs both complete answers, so the stream starts once the decision is made;
    it yields the kept side's answer in the ``pieces`` that side streamed (one piece when the
    kept side was not streamed).
    """
    text = result.response or ""
    chunks = pieces if pieces is not None and "".join(pieces) == text else [text]
    if isinstance(inner, StreamingResponse):
        return StreamingResponse(response_gen=iter(chunks), source_nodes=result.source_nodes,
                                 metadata=result.metadata)
    if isinstance(inner, AsyncStreamingResponse):
        return AsyncStreamingResponse(response_gen=_replay(chunks),
                                      source_nodes=result.source_nodes,
                                      metadata=result.metadata)
    return result


def response_text(value: Any) -> Any:
    """The text of a response of any type (a streamed one: what was streamed so far)."""
    if isinstance(value, Response):
        return value.response
    if isinstance(value, (StreamingResponse, AsyncStreamingResponse)):
        return value.response_txt
    return str(value)
