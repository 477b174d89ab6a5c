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

__all__ = ["aresolve", "like", "resolve", "response_text"]


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


async def _once(text: str) -> AsyncGenerator[str, None]:
    yield text


def like(inner: Any, result: Response) -> RESPONSE_TYPE:
    """``result`` in the inner engine's response type, so a streaming caller keeps working.

    Arbitration needs both complete answers, so the chosen answer arrives as one chunk.
    """
    if isinstance(inner, StreamingResponse):
        return StreamingResponse(response_gen=iter([result.response or ""]),
                                 source_nodes=result.source_nodes, metadata=result.metadata,
                                 response_txt=result.response)
    if isinstance(inner, AsyncStreamingResponse):
        return AsyncStreamingResponse(response_gen=_once(result.response or ""),
                                      source_nodes=result.source_nodes,
                                      metadata=result.metadata, response_txt=result.response)
    return result


def response_text(value: Any) -> Any:
    """The text of a response of any type (a streamed one: what was streamed so far)."""
    if isinstance(value, Response):
        return value.response
    if isinstance(value, (StreamingResponse, AsyncStreamingResponse)):
        return value.response_txt
    return str(value)
