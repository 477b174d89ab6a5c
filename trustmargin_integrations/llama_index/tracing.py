"""The trace collector: what an inner engine did during one query, from LlamaIndex's
instrumentation events (LLM predicts, retrievals, sub-queries), as a JSON list of steps."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import llama_index.core.instrumentation as instrument
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.base import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMPredictEndEvent, LLMPredictStartEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent
from llama_index.core.schema import QueryBundle

from trustmargin_integrations.llama_index.nodes import node_ref
from trustmargin_integrations.llama_index.responses import response_text

__all__ = ["Trace", "capture", "install_trace_collector"]

TRACE_TEXT_LIMIT = 500
"""Characters a trace keeps of one string (a synthesizer's packed context is much longer)."""


def _short(value: Any) -> Any:
    """A JSON value for a trace: long strings are cut, and say by how much."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    text = value if isinstance(value, str) else str(value)
    if len(text) > TRACE_TEXT_LIMIT:
        return f"{text[:TRACE_TEXT_LIMIT]}... [cut: {len(text)} characters]"
    return text


def _query_text(value: Any) -> str:
    return value.query_str if isinstance(value, QueryBundle) else str(value)


@dataclass
class Trace:
    """The steps of one inner query, from LlamaIndex's instrumentation events."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, event: BaseEvent) -> None:
        """Record one event (a predict's start waits for its end, paired by span)."""
        if isinstance(event, LLMPredictStartEvent):
            # Paired with its end event by span: concurrent predicts do not mix.
            args = event.template_args or {}
            self.pending[str(event.span_id)] = {str(key): _short(value)
                                                for key, value in args.items()}
        elif isinstance(event, LLMPredictEndEvent):
            self.steps.append({"event": "llm_predict",
                               "args": self.pending.pop(str(event.span_id), {}),
                               "output": event.output})
        elif isinstance(event, RetrievalEndEvent):
            self.steps.append({"event": "retrieve",
                               "query": _short(_query_text(event.str_or_query_bundle)),
                               "nodes": [node_ref(n) for n in event.nodes]})
        elif isinstance(event, QueryEndEvent):
            response = event.response
            self.steps.append({"event": "query", "query": _short(_query_text(event.query)),
                               "answer": _short(response_text(response)),
                               "source_nodes": [node_ref(n) for n in
                                                getattr(response, "source_nodes", None) or []]})


_ACTIVE_TRACE: ContextVar[Trace | None] = ContextVar("trustmargin_llama_trace", default=None)


class _TraceCollector(BaseEventHandler):
    """Root event handler that hands events to the trace of the current context, if any.

    It is installed once, the first time an engine asks for traces, and does nothing outside
    a :func:`capture` block (one context variable lookup per event).
    """

    @classmethod
    def class_name(cls) -> str:
        """Handler name, as LlamaIndex lists it."""
        return "TrustMarginTraceCollector"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        """Record ``event`` in the active trace."""
        trace = _ACTIVE_TRACE.get()
        if trace is not None:
            trace.add(event)


_COLLECTOR_LOCK = threading.Lock()
_COLLECTOR: list[_TraceCollector] = []


def install_trace_collector() -> None:
    """Register the collector on LlamaIndex's root dispatcher (once per process)."""
    with _COLLECTOR_LOCK:
        if not _COLLECTOR:
            _COLLECTOR.append(_TraceCollector())
            instrument.get_dispatcher().add_event_handler(_COLLECTOR[0])


@contextlib.contextmanager
def capture(on: bool) -> Iterator[Trace | None]:
    """Record the instrumentation events of the block (in this context) when ``on``."""
    if not on:
        yield None
        return
    trace = Trace()
    token = _ACTIVE_TRACE.set(trace)
    try:
        yield trace
    finally:
        _ACTIVE_TRACE.reset(token)
