"""LlamaIndex's FLARE engine set up for a small local model: a tag parser that reads only
well-formed ``[Search(query)]`` tags, a "done" check for short answers, and the builder."""

from __future__ import annotations

import re
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.llms import LLM
from llama_index.core.query_engine import FLAREInstructQueryEngine
from llama_index.core.query_engine.flare.answer_inserter import DirectLookaheadAnswerInserter
from llama_index.core.query_engine.flare.output_parser import (
    IsDoneOutputParser,
    QueryTaskOutputParser,
)
from llama_index.core.query_engine.flare.schema import QueryTask

__all__ = ["SearchOrDoneOutputParser", "SearchTagOutputParser", "build_flare_engine"]

_SEARCH_TAG = re.compile(r"\[Search\((.*?)\)\]", re.DOTALL)
_DONE = re.compile(r"\bdone\b", re.IGNORECASE)


class SearchTagOutputParser(QueryTaskOutputParser):
    """FLARE's query-task parser, reading only well-formed ``[Search(query)]`` tags.

    The stock parser treats every ``[``...``]`` pair as a tag and raises (``IndexError``,
    ``UnboundLocalError``) on a bracket without ``(``, or on a ``]`` before any ``[``; a
    small model writes such brackets (SmolLM2-135M answered ``... the [Zelvora Bridge
    Design] company``), which aborts the query. Other brackets are text here.
    """

    def parse(self, output: str) -> list[QueryTask]:
        """The search tasks of ``output`` (tag start, and end index of its ``]``)."""
        return [QueryTask(match.group(1).strip(), match.start(), match.end() - 1)
                for match in _SEARCH_TAG.finditer(output) if match.group(1).strip()]


class SearchOrDoneOutputParser(IsDoneOutputParser):
    """FLARE's "is the answer done?" check, for short answers from a small model.

    A look-ahead with a ``[Search(...)]`` tag is never done (the tag is searched first).
    Otherwise it is done when it holds the word ``done`` (removed from the answer) or, with
    ``stop_without_search`` (the default), when it is a sentence that asked for no search:
    for a short-answer question that sentence is the answer. The stock parser matches the
    substring "done" anywhere ("Donetsk", "abandoned") and ignores its ``is_done_fn``; a
    small model never writes "done", so the stock loop runs to ``max_iterations`` and
    appends a near copy of the sentence each time.
    """

    def __init__(self, stop_without_search: bool = True) -> None:
        super().__init__()
        self.stop_without_search = stop_without_search

    def parse(self, output: str) -> tuple[bool, str]:
        """``(done, answer text)`` for one look-ahead."""
        if _SEARCH_TAG.search(output):
            return False, output
        if _DONE.search(output):
            return True, " ".join(_DONE.sub(" ", output).split())
        return (True, output.strip()) if self.stop_without_search else (False, output)


def build_flare_engine(
    query_engine: BaseQueryEngine,
    llm: LLM,
    *,
    max_iterations: int = 3,
    stop_without_search: bool = True,
    **kwargs: Any,
) -> FLAREInstructQueryEngine:
    """LlamaIndex's ``FLAREInstructQueryEngine`` set up to run on a small local model.

    Three parts are swapped (each can still be passed in ``kwargs``), nothing else:

    - ``query_task_output_parser``: :class:`SearchTagOutputParser` (stray brackets do not
      raise);
    - ``done_output_parser``: :class:`SearchOrDoneOutputParser` (the word "done", or a
      sentence without a search, ends the answer);
    - ``lookahead_answer_inserter``: LlamaIndex's own ``DirectLookaheadAnswerInserter``,
      which puts the sub-query's answer in place of its tag. The default LLM inserter asks
      the model to rewrite the sentence with a long instruction; SmolLM2-135M answered that
      with text about the instruction ("The lookahead template may contain multiple ..."),
      even when there was nothing to insert.

    A small model rarely writes ``[Search(...)]`` tags, so FLARE often answers without
    retrieving and returns no source nodes; wrap the engine with
    ``TrustMarginQueryEngine(..., evidence="retriever")`` to score its answer against the
    question's top-k passages.

    Args:
        query_engine: the engine FLARE sends its search queries to (e.g. a
            ``RetrieverQueryEngine`` over a :class:`PassageRetriever`).
        llm: the LLM that writes the look-ahead sentences (e.g. :class:`LocalLlamaIndexLLM`).
        max_iterations: most look-ahead rounds (FLARE's default is 10).
        stop_without_search: see :class:`SearchOrDoneOutputParser`.
        kwargs: other ``FLAREInstructQueryEngine`` arguments.
    """
    kwargs.setdefault("query_task_output_parser", SearchTagOutputParser())
    kwargs.setdefault("done_output_parser", SearchOrDoneOutputParser(stop_without_search))
    kwargs.setdefault("lookahead_answer_inserter", DirectLookaheadAnswerInserter())
    return FLAREInstructQueryEngine(query_engine, llm=llm, max_iterations=max_iterations,
                                    **kwargs)
