"""JSON out of a local model for the framework adapters by schema-guided decoding
(:class:`GuidedDecoder`: structured output, tool calls, sub-questions), on the greedy streaming
of :mod:`.streaming`. The decoder writes the JSON structure itself and asks the model only for
the values, then validates the result against the schema; a reply that does not fit is a
:class:`StructuredOutputError`. The adapters import this module only when a user asks for
structured output (tests/test_layers.py). Why: docs/decisions.md, "Schema-guided JSON".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from trustmargin_integrations.backends.base import ContinuationRequest
from trustmargin_integrations.errors import BackendError
from trustmargin_integrations.extras import require
from trustmargin_integrations.streaming import prompt_ids, stream_greedy

MAX_ITEMS = 16
"""The most items the decoder writes into one array."""


class StructuredOutputError(BackendError, ValueError):
    """The model's reply is not valid JSON for the requested schema (or tool): a
    :class:`~trustmargin_integrations.errors.BackendError` (a model that cannot do what is
    asked) and a ``ValueError`` (what code parsing a model's output catches). Its
    ``llm_output`` is the reply."""

    def __init__(self, message: str, *, llm_output: str = "") -> None:
        super().__init__(message)
        self.llm_output = llm_output


def instruction(schema: Mapping[str, Any]) -> str:
    """The system instruction that asks for one JSON object of ``schema``."""
    return ("Reply with one JSON object that matches this JSON schema, and nothing else:\n"
            + json.dumps(schema, ensure_ascii=False))


def check(value: Any, schema: Mapping[str, Any], validate: Callable[[Any], Any],
          reply: str) -> Any:
    """``validate(value)`` after a JSON-schema check; either failure is a
    :class:`StructuredOutputError` quoting the reply; ``MissingExtraError`` naming the
    ``langchain`` extra on an install without ``jsonschema``."""
    require("langchain", ("jsonschema",), "Checking structured output against its schema")
    import jsonschema

    title = schema.get("title", "the schema")
    try:
        jsonschema.validate(value, dict(schema))
        return validate(value)
    except (jsonschema.ValidationError, ValidationError) as exc:
        where = "/".join(str(p) for p in getattr(exc, "absolute_path", [])) or "the object"
        problem = getattr(exc, "message", None) or str(exc).splitlines()[0]
        raise StructuredOutputError(
            f"The model's reply does not match {title} at {where}: {problem}. Reply: "
            f"{reply[:300]!r}. Fix: use a larger model, or a simpler schema (flat fields of "
            "string, number, boolean and enum types are decoded field by field)",
            llm_output=reply) from None


def parse_free(reply: str, schema: Mapping[str, Any]) -> Any:
    """The first JSON object in a freely decoded reply (code fences and text around it
    allowed)."""
    start = reply.find("{")
    if start == -1:
        raise StructuredOutputError(
            f"The model's reply holds no JSON object for {schema.get('title', 'the schema')}: "
            f"{reply[:300]!r}. Fix: use a larger model, or a schema of flat fields",
            llm_output=reply)
    try:
        value, _ = json.JSONDecoder().raw_decode(reply[start:])
    except json.JSONDecodeError as exc:
        raise StructuredOutputError(
            f"The model's reply is not valid JSON ({exc.msg} at character {exc.pos}): "
            f"{reply[:300]!r}. Fix: use a larger model, or a schema of flat fields",
            llm_output=reply) from None
    return value


@dataclass
class GuidedDecoder:
    """Writes one JSON value of a schema after ``prompt``, asking the model for the values.

    ``generate(text, stop, max_tokens)`` continues ``text`` greedily and returns the new text
    up to (not including) the first stop string; ``choose(text, options)`` returns the index
    of the most likely continuation. Both take the whole text so far (prompt plus JSON).
    """

    generate: Callable[[str, Sequence[str], int], str]
    choose: Callable[[str, Sequence[str]], int]
    root: Mapping[str, Any]
    max_items: int = MAX_ITEMS

    def supports(self, schema: Mapping[str, Any]) -> bool:
        """Whether every part of ``schema`` is a type this decoder writes."""
        schema = self._resolve(schema)
        if "enum" in schema or "const" in schema:
            return True
        options = schema.get("anyOf") or schema.get("oneOf")
        if options:
            return self.supports(_non_null(options))
        kind = schema.get("type")
        if kind == "object":
            props = schema.get("properties")
            return bool(props) and all(self.supports(p) for p in props.values())
        if kind == "array":
            return isinstance(schema.get("items"), Mapping) and self.supports(schema["items"])
        return kind in ("string", "integer", "number", "boolean", "null")

    def write(self, text: str, schema: Mapping[str, Any], where: str = "") -> tuple[str, Any]:
        """``text`` followed by one JSON value of ``schema``, and the value."""
        schema = self._resolve(schema)
        values = schema.get("enum", [schema["const"]] if "const" in schema else None)
        if values is not None:
            encoded = [json.dumps(v, ensure_ascii=False) for v in values]
            pick = self.choose(text, encoded)
            return text + encoded[pick], values[pick]
        options = schema.get("anyOf") or schema.get("oneOf")
        if options:
            return self.write(text, _non_null(options), where)
        kind = schema.get("type")
        if kind == "object":
            return self._object(text, schema, where)
        if kind == "array":
            return self._array(text, schema, where)
        if kind == "boolean":
            pick = self.choose(text, ["true", "false"])
            return text + ("true", "false")[pick], pick == 0
        if kind == "null":
            return text + "null", None
        if kind == "string":
            value = self.generate(text + '"', ['"', "\n"], 48)
            return text + json.dumps(value, ensure_ascii=False), value
        return self._number(text, kind, where)

    def _object(self, text: str, schema: Mapping[str, Any], where: str
                ) -> tuple[str, dict[str, Any]]:
        out: dict[str, Any] = {}
        text += "{"
        for i, (key, part) in enumerate(schema["properties"].items()):
            text += ("" if i == 0 else ", ") + json.dumps(key) + ": "
            text, out[key] = self.write(text, part, f"{where}/{key}")
        return text + "}", out

    def _array(self, text: str, schema: Mapping[str, Any], where: str
               ) -> tuple[str, list[Any]]:
        out: list[Any] = []
        text += "["
        while len(out) < self.max_items:
            if out and self.choose(text, [", ", "]"]) == 1:
                break
            text += ", " if out else ""
            text, item = self.write(text, schema["items"], f"{where}/{len(out)}")
            out.append(item)
        return text + "]", out

    def _number(self, text: str, kind: Any, where: str) -> tuple[str, Any]:
        raw = self.generate(text, [",", "}", "]", "\n"], 12).strip()
        try:
            value: Any = int(raw) if kind == "integer" else float(raw)
        except ValueError:
            # Written as the text it is: the schema check then names the place and the text.
            value = raw
        return text + json.dumps(value, ensure_ascii=False), value

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        node: Any = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return self._resolve(node)


def _non_null(options: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """An optional value's type (``anyOf: [X, null]`` is written as X)."""
    real = [o for o in options if o.get("type") != "null"]
    return real[0] if real else options[0]


def choose_by_likelihood(backend: Any) -> Callable[[str, Sequence[str]], int]:
    """``choose`` for :class:`GuidedDecoder`: the option with the highest mean token
    log-likelihood after the text."""
    def choose(text: str, options: Sequence[str]) -> int:
        scores = backend.score_continuations([ContinuationRequest(text, o) for o in options])
        means = [s.mean if s.num_tokens else float("-inf") for s in scores]
        return max(range(len(options)), key=means.__getitem__)

    return choose


def structured_reply(decoder: GuidedDecoder, rendered: str, schema: Mapping[str, Any],
                     budget: int) -> str:
    """The reply for one object of ``schema`` after the rendered prompt: the JSON written
    field by field when the decoder covers the schema, else the model's own reply after an
    opening ``{`` (parsed and checked later, by :func:`parse_free` and :func:`check`)."""
    if decoder.supports(schema):
        text, _ = decoder.write(rendered, schema)
        return text[len(rendered):]
    return "{" + decoder.generate(rendered + "{", [], budget)


def local_decoder(backend: Any, root: Mapping[str, Any], *, field: str = "prompt",
                  max_items: int = MAX_ITEMS) -> GuidedDecoder:
    """A :class:`GuidedDecoder` on a local backend (greedy text, likelihood choices)."""
    def generate(text: str, stop: Sequence[str], max_tokens: int) -> str:
        ids, room = prompt_ids(backend, text, max_tokens, field)
        return "".join(stream_greedy(backend, ids, room, list(stop)))

    return GuidedDecoder(generate=generate, choose=choose_by_likelihood(backend), root=root,
                         max_items=max_items)
