"""Structured output and tool calls for the LangChain chat model, on the package's
schema-guided decoder (:mod:`trustmargin_integrations.guided`): the schema of a pydantic class
or TypedDict, the reply for a structured turn, and tool calls offered, forced and parsed."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.utils.function_calling import convert_to_json_schema
from pydantic import BaseModel

from trustmargin_integrations.guided import (
    GuidedDecoder,
    StructuredOutputError,
    parse_free,
)


def schema_of(schema: Any) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """``(json_schema, validate)`` for a pydantic class, a TypedDict, a JSON-schema dict or an
    OpenAI tool/function dict; ``validate`` returns the pydantic instance or the dict."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        model = schema

        def to_model(value: Any) -> Any:
            return model.model_validate(value)

        return model.model_json_schema(), to_model
    json_schema = convert_to_json_schema(schema)
    return json_schema, lambda value: value


def tools_instruction(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system instruction that offers ``tools`` (OpenAI tool dicts)."""
    listed = [t["function"] for t in tools]
    return ("You can call these tools:\n" + json.dumps(listed, ensure_ascii=False)
            + '\nTo call one, reply with only a JSON object: {"name": <tool name>, '
              '"arguments": {<its arguments>}}. Otherwise answer the user.')


def tool_call(decoder: GuidedDecoder, rendered: str, tools: Sequence[Mapping[str, Any]],
              name: str | None) -> dict[str, Any]:
    """A forced tool call after the rendered prompt: the tool (``name``, else the most likely
    one) and its arguments, written by schema-guided decoding."""
    functions = {t["function"]["name"]: t["function"] for t in tools}
    text = rendered + '{"name": '
    if name is None:
        names = list(functions)
        name = names[decoder.choose(text, [json.dumps(n) for n in names])]
    text += json.dumps(name) + ', "arguments": '
    parameters = functions[name].get("parameters") or {"type": "object", "properties": {}}
    if not parameters.get("properties"):
        return {"name": name, "args": {}}
    if decoder.supports(parameters):
        _, args = decoder.write(text, parameters)
    else:
        args = parse_free("{" + decoder.generate(text + "{", [], 256), parameters)
    return {"name": name, "args": args}


def parse_tool_call(reply: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The tool call a freely decoded reply makes (``{"name": ..., "arguments": {...}}`` with a
    known name), or None when the reply is an answer."""
    names = {t["function"]["name"] for t in tools}
    text = reply.strip()
    if not text.startswith(("{", "```")):
        return None
    try:
        value = parse_free(text, {})
    except StructuredOutputError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    args = value.get("arguments", value.get("parameters", {}))
    return {"name": value["name"], "args": args if isinstance(args, dict) else {}}
