"""The drop-in: TrustMargin inserted into a user's RAG chain by one call.

:func:`with_trustmargin` returns a :class:`TrustMarginChain` with the chain's own input schema
and output type: it runs the chain as built (RAG) and with a retriever that answers no
documents (closed-book, or the user's ``closed_book_prompt``), concurrently, and returns the
kept side's output.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, cast

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.prompts import BasePromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableParallel,
    RunnablePassthrough,
    RunnableSequence,
    RunnableSerializable,
)
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import get_executor_for_config, patch_config
from langchain_core.runnables.utils import ConfigurableFieldSpec, add, get_unique_config_specs
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trustmargin_integrations.answering import warn_other_model
from trustmargin_integrations.arbiter import TrustMargin
from trustmargin_integrations.errors import InvalidInputError, typed_error
from trustmargin_integrations.langchain.answering import answering_model
from trustmargin_integrations.langchain.chains import text_of
from trustmargin_integrations.langchain.decisions import (
    DECISION_EVENT,
    Output,
    decision_payload,
)
from trustmargin_integrations.langchain.documents import check_documents, document_to_passage
from trustmargin_integrations.langchain.rewire import find, key_before, replace, walk
from trustmargin_integrations.langchain.router import TrustMarginRouter, as_router
from trustmargin_integrations.langchain.state import (
    MESSAGES_KEY,
    inner_config,
    last_human_text,
    runs_as_node,
    state_question,
)
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.shadow import Shadow, shadow_record
from trustmargin_integrations.sides import BothAnswers, chosen_side
from trustmargin_integrations.validation import check_question
from trustmargin_integrations.vocabulary import Side

SIDES: tuple[Side, ...] = ("rag", "direct")

SIDE_TAGS: dict[Side, str] = {"rag": "trustmargin:rag", "direct": "trustmargin:direct"}
"""The tag every run of one side carries (its chat model's ``on_chat_model_stream`` events
included), so a UI can tell the sides apart in ``astream_events``."""

SIDE_RUN_NAMES: dict[Side, str] = {"rag": "trustmargin_rag", "direct": "trustmargin_direct"}
"""The run name of each side's copy of the user's chain."""

_DOCUMENTS = "__trustmargin_documents"
# The RAG side's retriever output is handed back through the side's config: a list placed
# under "configurable" is shared by every child config of one call (LangChain copies the
# mapping, not its values, and traces only plain values from it), so concurrent calls and
# batches each record their own documents without a global.

_PARTS_FIX = ("pass the parts instead: with_trustmargin(None, tm, retriever=..., "
              "format_docs=..., prompt=..., llm=...)")


def _find_retriever(chain: Runnable[Any, Any], context_key: str) -> Runnable[Any, Any] | None:
    """The chain's retriever: its first ``BaseRetriever``; else, in a tutorial-shaped first
    step, the step of the context branch before its formatter (any Runnable returning
    Documents, such as a ``RunnableLambda`` over a search function)."""
    found = find(chain, lambda part: isinstance(part, BaseRetriever))
    if found is not None:
        return found
    first = chain.steps[0] if isinstance(chain, RunnableSequence) else None
    branch = first.steps__.get(context_key) if isinstance(first, RunnableParallel) else None
    if branch is None:
        return None
    steps = branch.steps if isinstance(branch, RunnableSequence) else [branch]
    return steps[max(len(steps) - 2, 0)]


def _chain_from_parts(retriever: Any, format_docs: Any, prompt: Any, llm: Any,
                      question_key: str, context_key: str) -> Runnable[Any, Any]:
    for name, value in (("retriever", retriever), ("prompt", prompt), ("llm", llm)):
        if not isinstance(value, Runnable):
            raise InvalidInputError(name, f"is a {type(value).__name__}, not a Runnable",
                                    "pass the chain itself, or its LangChain retriever, prompt "
                                    "and model")
    context = retriever if format_docs is None else retriever | coerce_to_runnable(format_docs)
    return (RunnableParallel({context_key: context, question_key: RunnablePassthrough()})
            | prompt | llm)


def _answer_key(chain: Runnable[Any, Any], given: str | None) -> str | None:
    """The output key holding the answer for a chain ending in ``.assign(key=...)``: the one
    key it assigns last (``given`` wins)."""
    if given is not None:
        return given
    last = chain.steps[-1] if isinstance(chain, RunnableSequence) else chain
    mapper = getattr(last, "mapper", None)
    keys = list(mapper.steps__) if isinstance(mapper, RunnableParallel) else []
    return keys[-1] if len(keys) == 1 else None


class _TypedTool(StructuredTool):
    """A tool whose arguments, when they do not fit the chain's input schema, are refused
    with an ``InvalidInputError`` naming the key (through the tool's error path, so the run
    is closed with the error), not pydantic's ``ValidationError``."""

    def _to_args_and_kwargs(self, tool_input: str | dict[str, Any], tool_call_id: str | None
                            ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        try:
            return super()._to_args_and_kwargs(tool_input, tool_call_id)
        except ValidationError as exc:
            raise typed_error(exc, "pass every key the chain reads (see the tool's "
                                   "args_schema)") from None


class TrustMarginChain(RunnableSerializable[Any, Any]):
    """A user's RAG chain guarded by TrustMargin (built by :func:`with_trustmargin`).

    Input: whatever the user's chain takes (its input schema, every key included: a
    ``MessagesPlaceholder`` history too). Output: with ``output="answer"`` the kept side's
    output, of the chain's own type (a string, an ``AIMessage``, a dict whose every key holds
    the kept side's value); with ``output="decision"`` the
    :class:`~trustmargin_integrations.schema.Decision`.

    Both sides run concurrently; each side's runs carry the tag :data:`SIDE_TAGS` and the
    run name :data:`SIDE_RUN_NAMES` (and ``metadata["trustmargin_side"]``), so
    ``astream_events(version="v2")`` shows both sides' tokens, told apart. ``stream`` and
    ``astream`` yield the kept side's chunks, as that side streamed them, as soon as the
    decision is made: after *both* sides have finished (the decision compares complete
    answers), plus one scoring pass. ``live="rag"`` (or ``"direct"``) streams that side's
    chunks as they are generated instead and, when the decision keeps the other side, emits
    a :data:`CORRECTION_EVENT` custom event with the kept output.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    chain: Runnable[Any, Any] = Field(description="The user's chain, as given.")
    sides: dict[str, Runnable[Any, Any]] = Field(
        description="The chain's two copies: 'rag' (its retriever recorded) and 'direct' "
                    "(its retriever answering no documents).")
    router: TrustMarginRouter
    output: Output = "answer"
    question_key: str = Field("question", description="The input key of the question when "
                                                      "the input is a dict.")
    answer_key: str | None = Field(None, description="The output key holding the answer, "
                                                     "for a chain returning a dict.")
    live: Side | None = Field(None, description="Stream this side as it is generated.")
    shadow: Shadow | None = Field(None, description="Shadow mode: answer with one side, decide "
                                                    "off the answer path (see Shadow).")

    # -- types, schemas, settings ------------------------------------------------------------

    @property
    def InputType(self) -> Any:  # noqa: N802 (LangChain's name)
        """The user's chain's input type."""
        return self.chain.InputType

    @property
    def OutputType(self) -> Any:  # noqa: N802 (LangChain's name)
        """The user's chain's output type, or the Decision."""
        return Decision if self.output == "decision" else self.chain.OutputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """The user's chain's input schema: every key it reads."""
        return self.chain.get_input_schema(config)

    def get_output_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """The user's chain's output schema, or the Decision's."""
        if self.output == "decision":
            return super().get_output_schema(config)
        return self.chain.get_output_schema(config)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The router's ``tau`` / ``lambda_bind`` and the user chain's own fields."""
        return get_unique_config_specs([*self.router.config_specs, *self.chain.config_specs])

    def as_tool(self, args_schema: type[BaseModel] | None = None, *, name: str | None = None,
                description: str | None = None, arg_types: dict[str, type] | None = None
                ) -> BaseTool:
        """The chain as a tool with the chain's input schema; arguments that do not fit it
        are an ``InvalidInputError`` naming the key."""
        tool = super().as_tool(args_schema, name=name, description=description,
                               arg_types=arg_types)
        if not isinstance(tool, StructuredTool):
            return tool
        return _TypedTool(name=tool.name, description=tool.description,
                          args_schema=tool.args_schema, func=tool.func,
                          coroutine=tool.coroutine)

    # -- the steps ---------------------------------------------------------------------------

    def _question(self, value: Any) -> str:
        """The question to score, from the input (checked before anything runs), and the
        keys the chain requires (a missing one is named, not a KeyError deep inside)."""
        if isinstance(value, Mapping):
            schema = self.chain.get_input_schema()
            for key, info in getattr(schema, "model_fields", {}).items():
                if info.is_required() and key not in value and key != "root":
                    raise InvalidInputError(key, "is missing", f"pass {key!r}: the chain reads "
                                            f"it (its input keys: {sorted(schema.model_fields)})")
            if self.question_key not in value:
                raise InvalidInputError(self.question_key, "is missing",
                                        "pass the question under this key, or name its key "
                                        "with with_trustmargin(..., question_key=...)")
            return check_question(value[self.question_key], self.question_key)
        return check_question(value, "question")

    def _side_config(self, config: RunnableConfig, callbacks: Any, side: Side,
                     documents: list[list[Document]]) -> RunnableConfig:
        cfg = patch_config(config, callbacks=callbacks, run_name=SIDE_RUN_NAMES[side])
        cfg["tags"] = [*(cfg.get("tags") or []), SIDE_TAGS[side]]
        cfg["metadata"] = {**(cfg.get("metadata") or {}), "trustmargin_side": side}
        if side == "rag":
            cfg["configurable"] = {**(cfg.get("configurable") or {}), _DOCUMENTS: documents}
        return cfg

    def _router_input(self, question: str, documents: list[list[Document]],
                      outputs: Mapping[Side, Any]) -> dict[str, Any]:
        texts = {side: self._text(outputs[side], side) for side in SIDES}
        return {"question": question, "documents": documents[0] if documents else [],
                "direct_answer": texts["direct"], "rag_answer": texts["rag"]}

    def _text(self, value: Any, side: Side) -> str | None:
        """A side's output as the text to score: a string, a message's text, or the answer
        key's value of a dict."""
        if isinstance(value, Mapping):
            key = self.answer_key or ("answer" if "answer" in value else None)
            if key is None or key not in value:
                raise InvalidInputError("answer_key", f"the chain returned a dict with the keys "
                                        f"{sorted(value)} and no answer key",
                                        "name the key that holds the answer: "
                                        "with_trustmargin(..., answer_key=...)")
            value = value[key]
        if isinstance(value, BaseMessage | str) or value is None:
            return text_of(value)
        raise InvalidInputError(f"{side}.output", f"the chain returned a "
                                f"{type(value).__name__}", "end the chain with a chat model, an "
                                "output parser returning text, or .assign(answer=...)")

    def fixed_side(self, config: RunnableConfig | None = None) -> Side | None:
        """The side a call with ``config`` keeps whatever the margins: the policy's fixed
        side (always-RAG, always-Direct; see ``Policy.fixed_side``) when the output is the
        answer; None when the call must score (a margin policy, or ``output="decision"``)."""
        if self.output != "answer":
            return None
        return self.router.call_policy(config).fixed_side

    def _only(self, side: Side, config: RunnableConfig, callbacks: Any
              ) -> tuple[Runnable[Any, Any], RunnableConfig]:
        """The one runnable a fixed-side call runs, with its side's config: the user's chain
        itself for RAG (nothing recorded, nothing scored), its closed-book copy for Direct."""
        runnable = self.chain if side == "rag" else self.sides["direct"]
        return runnable, self._side_config(config, callbacks, side, [])

    def both_answers(self, value: Any, config: RunnableConfig | None = None) -> BothAnswers:
        """Your chain run both ways on one input, as a scoring call runs it (concurrently,
        each side tagged), but nothing scored: the closed-book and the deployed answer as
        text, and the page contents of the documents the deployed run retrieved. What
        ``trustmargin check --chain`` records for each labeled question."""
        self._question(value)
        documents: list[list[Document]] = []
        cfg = config or {}
        outputs = self._run_sides(lambda side, c: self.sides[side].invoke(value, c), cfg,
                                  cfg.get("callbacks"), documents)
        texts = {side: self._text(outputs[side], side) or "" for side in SIDES}
        return BothAnswers(direct=texts["direct"], rag=texts["rag"],
                           passages=tuple(d.page_content for d in
                                          (documents[0] if documents else [])))

    def _shaped(self, decision: Decision, outputs: Mapping[Side, Any]) -> Any:
        return decision if self.output == "decision" else outputs[chosen_side(decision)]

    # -- shadow mode -------------------------------------------------------------------------

    def _shadow_side(self, config: RunnableConfig) -> Side | None:
        """In shadow mode, the one side the answer path runs: the policy's fixed side, else
        the user's chain as deployed (RAG); None when not in shadow mode."""
        if self.shadow is None or self.output != "answer":
            return None
        return self.fixed_side(config) or "rag"

    def _shadow_submit(self, value: Any, question: str, served: Side, output: Any,
                       documents: list[list[Document]], config: RunnableConfig,
                       callbacks: Any) -> None:
        """Hand the rest of the decision to the shadow queue; nothing here can fail the call
        (an error building the job is logged and counted like a failed job)."""
        shadow = cast("Shadow", self.shadow)

        def job() -> None:
            other: Side = "direct" if served == "rag" else "rag"
            cfg = self._side_config(config, callbacks, other, documents)
            cfg["tags"] = [*cfg["tags"], SHADOW_TAG]
            outputs = {served: output, other: self.sides[other].invoke(value, cfg)}
            child = inner_config(patch_config(config, callbacks=callbacks))
            child["tags"] = [*(child.get("tags") or []), SHADOW_TAG]
            child["configurable"] = {**(child.get("configurable") or {}),
                                     **shadow.policy.setting}
            routed = self._router_input(question, documents, outputs)
            decision = cast("Decision", self.router.invoke(routed, child))
            dispatch_custom_event(SHADOW_EVENT, {
                "served": served, "would_change": chosen_side(decision) != served,
                "decision": decision_payload(decision)}, config=child)
            shadow.record(shadow_record(
                decision, question, [document_to_passage(d) for d in routed["documents"]],
                routed["direct_answer"] or "", routed["rag_answer"] or "", served))

        shadow.submit(job)

    # -- invoke ------------------------------------------------------------------------------

    def _decide(self, question: str, documents: list[list[Document]],
                outputs: Mapping[Side, Any], run_manager: CallbackManagerForChainRun,
                config: RunnableConfig) -> Decision:
        child = inner_config(patch_config(config, callbacks=run_manager.get_child()))
        decision = cast("Decision", self.router.invoke(
            self._router_input(question, documents, outputs), child))
        dispatch_custom_event(DECISION_EVENT, decision_payload(decision), config=child)
        return decision

    async def _adecide(self, question: str, documents: list[list[Document]],
                       outputs: Mapping[Side, Any], run_manager: AsyncCallbackManagerForChainRun,
                       config: RunnableConfig) -> Decision:
        child = inner_config(patch_config(config, callbacks=run_manager.get_child()))
        decision = cast("Decision", await self.router.ainvoke(
            self._router_input(question, documents, outputs), child))
        await adispatch_custom_event(DECISION_EVENT, decision_payload(decision), config=child)
        return decision

    def _run_sides(self, run: Callable[[Side, RunnableConfig], Any],
                   config: RunnableConfig, callbacks: Any, documents: list[list[Document]]
                   ) -> dict[Side, Any]:
        """``run(side, side_config)`` for both sides at once, in worker threads."""
        with get_executor_for_config(config) as executor:
            futures = {side: executor.submit(run, side, self._side_config(
                config, callbacks, side, documents)) for side in SIDES}
            return {side: future.result() for side, future in futures.items()}

    def _invoke(self, value: Any, run_manager: CallbackManagerForChainRun,
                config: RunnableConfig) -> Any:
        question = self._question(value)
        served = self._shadow_side(config)
        if served is not None:
            documents: list[list[Document]] = []
            callbacks = run_manager.get_child()
            output = self.sides[served].invoke(value, self._side_config(
                config, callbacks, served, documents))
            self._shadow_submit(value, question, served, output, documents, config, callbacks)
            return output
        fixed = self.fixed_side(config)
        if fixed is not None:
            runnable, cfg = self._only(fixed, config, run_manager.get_child())
            return runnable.invoke(value, cfg)
        documents = []
        outputs = self._run_sides(lambda side, cfg: self.sides[side].invoke(value, cfg),
                                  config, run_manager.get_child(), documents)
        decision = self._decide(question, documents, outputs, run_manager, config)
        return self._shaped(decision, outputs)

    async def _ainvoke(self, value: Any, run_manager: AsyncCallbackManagerForChainRun,
                       config: RunnableConfig) -> Any:
        question = self._question(value)
        served = self._shadow_side(config)
        callbacks = run_manager.get_child()
        documents: list[list[Document]] = []
        if served is not None:
            output = await self.sides[served].ainvoke(value, self._side_config(
                config, callbacks, served, documents))
            self._shadow_submit(value, question, served, output, documents, config, callbacks)
            return output
        fixed = self.fixed_side(config)
        if fixed is not None:
            runnable, cfg = self._only(fixed, config, run_manager.get_child())
            return await runnable.ainvoke(value, cfg)
        results = await asyncio.gather(*(self.sides[side].ainvoke(
            value, self._side_config(config, callbacks, side, documents)) for side in SIDES))
        outputs = dict(zip(SIDES, results, strict=True))
        decision = await self._adecide(question, documents, outputs, run_manager, config)
        return self._shaped(decision, outputs)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run both sides concurrently, arbitrate, return the kept side's output (as a
        LangGraph node: the state update, see :meth:`state_input`)."""
        if runs_as_node(input, config):
            output = self.invoke(self.state_input(input), inner_config(cast("Any", config)))
            return self.state_update(input, output)
        return self._call_with_config(self._invoke, input, config, run_type="chain")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
                      ) -> Any:
        """Async :meth:`invoke`: both sides are awaited concurrently."""
        if runs_as_node(input, config):
            output = await self.ainvoke(self.state_input(input),
                                        inner_config(cast("Any", config)))
            return self.state_update(input, output)
        return await self._acall_with_config(self._ainvoke, input, config, run_type="chain")

    # -- as a LangGraph node -----------------------------------------------------------------

    def _input_keys(self) -> list[str]:
        """The keys of a dict-input chain (empty: the chain takes the question itself)."""
        fields = getattr(self.chain.get_input_schema(), "model_fields", {})
        return [key for key in fields if key != "root"]

    def state_input(self, state: Mapping[str, Any]) -> Any:
        """The chain's input from a graph's state, when the chain is added as a node: the
        question (``state[question_key]``, else the last human message of a
        ``MessagesState``) for a chain that takes the question itself; for a dict-input
        chain, the state's values at the chain's input keys, the question included."""
        question = state_question(state, self.question_key)
        if question is None:
            raise InvalidInputError(self.question_key, "is missing from the graph's state (and "
                                    f"it has no human message under {MESSAGES_KEY!r})",
                                    f"store the question under {self.question_key!r}, or name "
                                    "its key with with_trustmargin(..., question_key=...)")
        keys = self._input_keys()
        if not keys:
            return question
        return {**{key: state[key] for key in keys if key in state},
                self.question_key: question}

    def state_update(self, state: Mapping[str, Any], output: Any) -> dict[str, Any]:
        """The node's state update: the output under ``"answer"`` (``"decision"`` with
        ``output="decision"``); in a ``MessagesState`` graph whose question came from the
        last human message, the answer also as an ``AIMessage`` appended to ``messages``."""
        if self.output == "decision":
            return {"decision": output}
        update: dict[str, Any] = {"answer": output}
        if state.get(self.question_key) is None and last_human_text(state) is not None:
            message = output if isinstance(output, BaseMessage) else AIMessage(
                content=self._text(output, "rag") or "")
            update[MESSAGES_KEY] = [message]
        return update

    # -- streaming ---------------------------------------------------------------------------

    def _transform(self, inputs: Iterator[Any], run_manager: CallbackManagerForChainRun,
                   config: RunnableConfig) -> Iterator[Any]:
        value = add(inputs)
        question = self._question(value)
        documents: list[list[Document]] = []
        callbacks = run_manager.get_child()
        served = self._shadow_side(config)
        if served is not None:
            streamed = []
            for chunk in self.sides[served].stream(value, self._side_config(
                    config, callbacks, served, documents)):
                streamed.append(chunk)
                yield chunk
            self._shadow_submit(value, question, served, add(streamed), documents, config,
                                callbacks)
            return
        fixed = self.fixed_side(config)
        if fixed is not None:
            runnable, cfg = self._only(fixed, config, run_manager.get_child())
            yield from runnable.stream(value, cfg)
            return
        if self.live is not None:
            yield from self._live(value, question, documents, run_manager, config)
            return
        chunks = self._run_sides(lambda side, cfg: list(self.sides[side].stream(value, cfg)),
                                 config, callbacks, documents)
        outputs = {side: add(chunks[side]) for side in SIDES}
        decision = self._decide(question, documents, outputs, run_manager, config)
        if self.output == "decision":
            yield decision
        else:
            yield from chunks[chosen_side(decision)]

    def _live(self, value: Any, question: str, documents: list[list[Document]],
              run_manager: CallbackManagerForChainRun, config: RunnableConfig
              ) -> Iterator[Any]:
        """Stream the live side while the other one runs in a worker thread; correct at the
        end when the decision keeps the other side."""
        live = cast("Side", self.live)
        other: Side = "direct" if live == "rag" else "rag"
        callbacks = run_manager.get_child()
        with get_executor_for_config(config) as executor:
            pending = executor.submit(
                lambda: self.sides[other].invoke(value, self._side_config(
                    config, callbacks, other, documents)))
            streamed = []
            for chunk in self.sides[live].stream(value, self._side_config(
                    config, callbacks, live, documents)):
                streamed.append(chunk)
                yield chunk
            outputs = {live: add(streamed), other: pending.result()}
        decision = self._decide(question, documents, outputs, run_manager, config)
        if chosen_side(decision) != live:
            dispatch_custom_event(CORRECTION_EVENT, _correction(decision, outputs),
                                  config=patch_config(config, callbacks=run_manager.get_child()))

    async def _atransform(self, inputs: AsyncIterator[Any],
                          run_manager: AsyncCallbackManagerForChainRun,
                          config: RunnableConfig) -> AsyncIterator[Any]:
        value = add([item async for item in inputs])
        question = self._question(value)
        documents: list[list[Document]] = []
        callbacks = run_manager.get_child()
        served = self._shadow_side(config)
        if served is not None:
            streamed = []
            async for chunk in self.sides[served].astream(value, self._side_config(
                    config, callbacks, served, documents)):
                streamed.append(chunk)
                yield chunk
            self._shadow_submit(value, question, served, add(streamed), documents, config,
                                callbacks)
            return
        fixed = self.fixed_side(config)
        if fixed is not None:
            runnable, cfg = self._only(fixed, config, run_manager.get_child())
            async for chunk in runnable.astream(value, cfg):
                yield chunk
            return
        configs = {side: self._side_config(config, callbacks, side, documents)
                   for side in SIDES}
        if self.live is not None:
            live = self.live
            other: Side = "direct" if live == "rag" else "rag"
            pending = asyncio.ensure_future(self.sides[other].ainvoke(value, configs[other]))
            streamed = []
            async for chunk in self.sides[live].astream(value, configs[live]):
                streamed.append(chunk)
                yield chunk
            outputs = {live: add(streamed), other: await pending}
            decision = await self._adecide(question, documents, outputs, run_manager, config)
            if chosen_side(decision) != live:
                await adispatch_custom_event(
                    CORRECTION_EVENT, _correction(decision, outputs),
                    config=patch_config(config, callbacks=run_manager.get_child()))
            return

        async def collect(side: Side) -> list[Any]:
            return [chunk async for chunk in self.sides[side].astream(value, configs[side])]

        results = await asyncio.gather(*(collect(side) for side in SIDES))
        chunks = dict(zip(SIDES, results, strict=True))
        outputs = {side: add(chunks[side]) for side in SIDES}
        decision = await self._adecide(question, documents, outputs, run_manager, config)
        if self.output == "decision":
            yield decision
            return
        for chunk in chunks[chosen_side(decision)]:
            yield chunk

    def transform(self, input: Iterator[Any], config: RunnableConfig | None = None,
                  **kwargs: Any) -> Iterator[Any]:
        """Stream (see the class docstring for what is streamed when)."""
        yield from self._transform_stream_with_config(input, self._transform, config,
                                                      run_type="chain")

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
               ) -> Iterator[Any]:
        """The kept side's chunks once the decision is made (``live``: one side's chunks as
        they come)."""
        yield from self.transform(iter([input]), config, **kwargs)

    async def atransform(self, input: AsyncIterator[Any], config: RunnableConfig | None = None,
                         **kwargs: Any) -> AsyncIterator[Any]:
        """Async :meth:`transform`."""
        async for chunk in self._atransform_stream_with_config(input, self._atransform, config,
                                                               run_type="chain"):
            yield chunk

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
                      ) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""

        async def once() -> AsyncIterator[Any]:
            yield input

        async for chunk in self.atransform(once(), config, **kwargs):
            yield chunk


SHADOW_EVENT = "trustmargin_shadow_decision"
"""Name of the custom event a shadow-mode chain emits from the shadow queue, after the call
returned: ``{"served": the side the user got, "would_change": whether the shadow policy keeps
the other side, "decision": the Decision as JSON}``."""

SHADOW_TAG = "trustmargin:shadow"
"""The tag of every run the shadow queue makes (the other side, the router)."""

CORRECTION_EVENT = "trustmargin_correction"
"""Name of the custom event a ``live`` stream emits when the decision keeps the side that was
not streamed: ``{"side": kept side, "answer": its text, "output": its output when JSON can
carry it, "decision": the Decision as JSON}``."""


def _correction(decision: Decision, outputs: Mapping[Side, Any]) -> dict[str, Any]:
    side = chosen_side(decision)
    kept = outputs[side]
    return {"side": side, "answer": decision.answer, "output": kept,
            "decision": decision_payload(decision)}


def _recording(retriever: Runnable[Any, Any], field_name: str) -> Runnable[Any, Any]:
    """The RAG side's retriever: the user's, its documents checked and recorded for the
    scorer (through the side's config, see ``_DOCUMENTS``)."""
    def record(docs: Any, config: RunnableConfig) -> list[Document]:
        checked = check_documents(docs, f"retriever({field_name})")
        store = (config.get("configurable") or {}).get(_DOCUMENTS)
        if isinstance(store, list):
            store.append(checked)
        return checked

    return retriever | RunnableLambda(record, name="trustmargin_documents")


def with_trustmargin(
    chain: Runnable[Any, Any] | None,
    tm: TrustMargin | TrustMarginRouter,
    *,
    retriever: Runnable[Any, Any] | None = None,
    format_docs: Callable[[list[Document]], Any] | Runnable[Any, Any] | None = None,
    prompt: Runnable[Any, Any] | None = None,
    llm: Runnable[Any, Any] | None = None,
    closed_book_prompt: Runnable[Any, Any] | None = None,
    question_key: str | None = None,
    context_key: str = "context",
    answer_key: str | None = None,
    output: Output = "answer",
    live: Side | None = None,
    shadow: Shadow | None = None,
) -> TrustMarginChain:
    """Your RAG chain with TrustMargin inserted: the same input and the same output type.

    ``chain`` is any LCEL chain with a LangChain retriever in it: LangChain's RAG tutorial
    (``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm
    | StrOutputParser()``), the same with ``itemgetter`` keys and more keys for the prompt (a
    ``MessagesPlaceholder`` history), one ending in the chat model (its ``AIMessage`` is
    returned), or the "with sources" shape ``RunnableParallel({"context": retriever,
    "question": RunnablePassthrough()}).assign(answer=prompt | llm | StrOutputParser())``
    (the kept side's dict is returned; a Direct answer's ``context`` is the empty list it was
    given). Or pass ``chain=None`` and its parts.

    The returned :class:`TrustMarginChain` runs *your* chain twice, concurrently: as it is
    (RAG; the retrieved documents are recorded for the scorer) and with the retriever
    answering no documents (Direct: your formatter and prompt with the empty context, or
    ``closed_book_prompt``). TrustMargin scores both answers and the chain returns the kept
    side's output exactly as your chain produced it. The Decision (margins, reason, both
    answers) is the router's output in the trace and the
    :data:`~trustmargin_integrations.langchain.decisions.DECISION_EVENT` custom event;
    ``output="decision"`` returns it instead. When nothing is retrieved the closed-book
    output is returned (reason ``no_evidence``). Streaming: see :class:`TrustMarginChain`.
    When the chain's chat model is not the scorer (``tm.backend.model_id``), a warning naming
    both is logged once per pair of models.

    Args:
        chain: your chain, or None to build the tutorial shape from the parts below.
        tm: the arbiter (its model scores both answers), or a :class:`TrustMarginRouter`.
        retriever, format_docs, prompt, llm: the parts, when ``chain`` is None; ``llm`` may
            be ``model | parser``. ``format_docs`` defaults to passing the documents as is.
        closed_book_prompt: the Direct side's prompt (default: your prompt with an empty
            context); it gets the same variables.
        question_key: the input key of the question for a dict input (default: the key an
            ``itemgetter`` before the retriever reads, else ``"question"``).
        context_key: the context key of a tutorial-shaped first step (and of the parts).
        answer_key: for a chain returning a dict, the key of the answer (default: the one
            key a final ``.assign`` adds, else ``"answer"``).
        output: ``"answer"`` (the kept side's output) or ``"decision"`` (the Decision).
        live: stream this side as it is generated (see :class:`TrustMarginChain`).
        shadow: shadow mode (a :class:`~trustmargin_integrations.shadow.Shadow`): each call
            runs one side only (the policy's fixed side, else your chain as it is), returns and
            streams it as your chain does, then queues the rest off the answer path: the
            other side, the scoring, the decision under ``shadow.policy`` (the paper's rule by
            default), delivered as the :data:`SHADOW_EVENT` custom event and appended to
            ``shadow.log``. ``shadow.flush()`` waits for the queue.

    Raises:
        InvalidInputError: at build time for a chain without a retriever (``chain``), a bad
            ``tm`` or missing parts; at call time for a missing input key or blank question
            (named by your key) or a retriever that returns something other than Documents
            (``retriever(question)[j]``).
    """
    router = as_router(tm).model_copy(update={"output": "decision"})
    if shadow is not None and (not isinstance(shadow, Shadow) or output != "answer"
                               or live is not None):
        raise InvalidInputError("shadow", f"is {shadow!r} with output={output!r}, "
                                f"live={live!r}", "pass a Shadow(...) with output='answer' and "
                                "no live side (the answer path runs one side only)")
    if live is not None and (live not in SIDES or output != "answer"):
        raise InvalidInputError("live", f"is {live!r} with output={output!r}",
                                "pass live='rag' or 'direct' with output='answer' (a live "
                                "stream is an answer as it is generated)")
    if chain is None:
        chain = _chain_from_parts(retriever, format_docs, prompt, llm,
                                  question_key or "question", context_key)
    elif not isinstance(chain, Runnable):
        raise InvalidInputError("chain", f"is a {type(chain).__name__}, not a Runnable",
                                "pass your LCEL chain, or None and its parts")
    target = _find_retriever(chain, context_key)
    if target is None:
        raise InvalidInputError("chain", "has no retriever (no BaseRetriever, and no "
                                f"'{context_key}' branch in a first step)", _PARTS_FIX)
    key = question_key or key_before(chain, target) or "question"
    field_name = key if key_before(chain, target) or question_key else "question"
    no_documents: RunnableLambda[Any, list[Any]] = RunnableLambda(lambda _: [], name="no_documents")
    direct = replace(chain, target, no_documents)
    if closed_book_prompt is not None:
        user_prompt = next((p for p in walk(direct) if isinstance(p, BasePromptTemplate)), None)
        if user_prompt is None:
            raise InvalidInputError("closed_book_prompt", "has no prompt template to replace "
                                    "in the chain", "drop it, or put your prompt template in "
                                    "the chain")
        direct = replace(direct, user_prompt, closed_book_prompt)
    sides = {"rag": replace(chain, target, _recording(target, field_name)), "direct": direct}
    warn_other_model(answering_model(chain), router.tm.backend.model_id)
    return TrustMarginChain(chain=chain, sides=sides, router=router, output=output,
                            question_key=key, answer_key=_answer_key(chain, answer_key),
                            live=live, shadow=shadow, name="TrustMarginChain")
