"""The router Runnable: arbitrate a closed-book and a RAG answer, with per-call settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig, RunnableLambda, RunnableSerializable
from langchain_core.runnables.config import run_in_executor
from langchain_core.runnables.utils import ConfigurableFieldSpec
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict, Field

from trustmargin_integrations.arbiter import PreparedQuestion, TrustMargin
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.langchain.decisions import Output, describe_decision, shape_output
from trustmargin_integrations.langchain.inputs import TrustMarginInput, core_input, positional
from trustmargin_integrations.langchain.state import (
    StateKeys,
    inner_config,
    runs_as_node,
    stream_writer,
)
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision
from trustmargin_integrations.validation import TypedFields

MARGINS_EVENT = "trustmargin_margins"
"""Name of the custom callback event each routed input emits with its margins."""


CONFIG_SPECS = [
    ConfigurableFieldSpec(
        id="tau", annotation=float | None, name="tau", default=None,
        description="TrustMargin threshold for this call: RAG is chosen iff M > tau "
                    "(None: the router's tau, else tm.config.tau)."),
    ConfigurableFieldSpec(
        id="lambda_bind", annotation=float | None, name="lambda_bind", default=None,
        description="Weight of the binding margin for this call (None: the router's "
                    "lambda_bind, else tm.config.lambda_bind)."),
    ConfigurableFieldSpec(
        id="policy", annotation=str | None, name="policy", default=None,
        description="Who decides this call (a policy name such as 'rule', 'bind_only' or "
                    "'always_rag'; None: the router's policy, else tm.config.policy)."),
]


_TUNABLE = ("policy", "tau", "lambda_bind")


def margins_payload(decision: Decision) -> dict[str, Any]:
    """What the margins event carries: enough to audit the choice without the Decision."""
    return {key: getattr(decision, key) for key in
            ("id", "question", "source", "reason", "answer", "m_prior", "m_bind", "m",
             "lambda_bind", "tau")}


def call_policy(tm: TrustMargin, config: RunnableConfig | None, defaults: Mapping[str, Any]
                ) -> Policy:
    """The policy a call with ``config`` decides by: ``tm.config``'s, with this call's
    ``policy``, ``tau`` and ``lambda_bind``. The arbiter and its model are the same for every
    call (no likelihood depends on these settings).

    Precedence: ``config["configurable"]``, then the router's own fields (``defaults``),
    then ``tm.config``.

    Raises:
        InvalidInputError: a value out of bounds, an unknown policy, or a number the
            call's policy never consults.
    """
    configurable = (config or {}).get("configurable") or {}
    update = {}
    for key in _TUNABLE:
        value = configurable.get(key, defaults.get(key))
        if value is not None and value != getattr(tm.config, key):
            update[key] = value
    if not update:
        return tm.config.decision_policy
    try:
        # model_validate, not model_copy(update=...): a NaN tau must be refused, not applied.
        cfg = TrustMarginConfig.model_validate({**tm.config.model_dump(), **update})
    except InvalidInputError as exc:
        raise InvalidInputError(f"configurable.{exc.field}", exc.problem, exc.fix) from None
    policy = cfg.decision_policy
    # A value the policy never consults (tau under always-Direct, lambda_bind under a
    # one-margin rule) would be recorded in the Decision as if it had decided.
    for key in update:
        if key != "policy" and key not in policy.numbers:
            field = f"configurable.{key}" if configurable.get(key) is not None else key
            raise InvalidInputError(field, f"is ignored by the policy {policy.label!r}, which "
                                    f"does not use {key} (the Decision would record "
                                    f"{key}={update[key]!r} while the policy decided)",
                                    f"drop {key}, or use the margin rule (policy='rule')")
    return policy


def node_update(keys: StateKeys, state: Mapping[str, Any], decision: Decision
                ) -> dict[str, Any]:
    """A TrustMargin node's state update (:meth:`StateKeys.update`), its margins first
    written to LangGraph's custom stream as ``{MARGINS_EVENT: {...}}``."""
    margins = margins_payload(decision)
    writer = stream_writer()
    if writer is not None:
        writer({MARGINS_EVENT: margins})
    return keys.update(state, decision, margins)


def as_router(value: Any, field: str = "tm") -> TrustMarginRouter:
    """``value`` as a router: a :class:`TrustMarginRouter` as it is, a TrustMargin wrapped in
    one; anything else is an error naming ``field`` (the builders take either)."""
    if isinstance(value, TrustMarginRouter):
        return value
    if isinstance(value, TrustMargin):
        return TrustMarginRouter(value)
    raise InvalidInputError(field, f"a {type(value).__name__} is not a TrustMargin or a "
                            "TrustMarginRouter", "pass TrustMargin.from_pretrained() (or a "
                            "TrustMarginRouter around one)")


class TrustMarginRouter(TypedFields, RunnableSerializable[TrustMarginInput, "Decision | str"]):
    """Route between a closed-book and a RAG answer with TrustMargin.

    Input: a dict shaped like :class:`TrustMarginInput` (parsed with that model; the core
    then validates the content, and every error names the key you passed, e.g.
    ``documents[1]``, or ``inputs[1].question`` in a batch). Output: the core
    :class:`~trustmargin_integrations.schema.Decision`, so ``.answer`` is one attribute away
    and the margins (``m_prior``, ``m_bind``, ``m``) travel with it. With
    ``output="answer"`` the output is the chosen side's full text instead, so
    ``... | router | StrOutputParser()`` works; ``as_tool()`` returns that text with one line
    on how it was chosen.

    Per call, ``router.with_config(configurable={"tau": -0.5, "lambda_bind": 1.0})`` (or
    ``{"policy": "bind_only", "tau": -3.0}``) changes the policy that decides (recorded in
    the Decision); the router's own ``policy`` / ``tau`` / ``lambda_bind`` fields set its
    defaults. All fall back to ``tm.config``. The arbiter is never rebuilt for them.

    ``batch``/``abatch`` send all valid inputs to the scorer in one
    ``TrustMargin.arbitrate_batch`` call, whatever policy each input's config names (no
    likelihood depends on it). Each input still gets its own traced run whose output is its
    Decision, and a :data:`MARGINS_EVENT` custom event with its margins.

    The arbiter comes first, positionally or by name (``TrustMarginRouter(tm)``); the other
    fields are keywords. A bad argument is an ``InvalidInputError`` naming it.

    Example:
        >>> router = TrustMarginRouter(TrustMargin.from_pretrained())  # doctest: +SKIP
        >>> router.invoke({"question": "Who wrote Hamlet?", "direct_answer": "Shakespeare",
        ...                "rag_answer": "Marlowe", "context": ["Hamlet ..."]})  # doctest: +SKIP
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tm: TrustMargin = Field(description="The arbiter; its backend is the scorer model.")
    include_prompts: bool | None = Field(
        None, description="Attach rendered prompts to each Decision (None: tm.config's value).")
    policy: str | None = Field(
        None, description="Who decides (a policy name; None: tm.config.policy).")
    tau: float | None = Field(
        None, allow_inf_nan=False, description="Threshold (None: tm.config.tau).")
    lambda_bind: float | None = Field(
        None, allow_inf_nan=False, description="Binding-margin weight (None: "
                                               "tm.config.lambda_bind).")
    output: Output = Field(
        "decision", description="'decision': the Decision; 'answer': the chosen side's full "
                                "text, so the router ends a chain like a model and parser.")

    def __init__(self, tm: TrustMargin | None = None, /, **kwargs: Any) -> None:
        super().__init__(**positional("tm", tm, kwargs))

    @property
    def InputType(self) -> type[TrustMarginInput]:  # noqa: N802 (LangChain's name)
        """The typed input record."""
        return TrustMarginInput

    @property
    def OutputType(self) -> Any:  # noqa: N802 (LangChain's name)
        """The core Decision, or ``str`` with ``output="answer"``."""
        return str if self.output == "answer" else Decision

    def as_tool(self, args_schema: type[BaseModel] | None = None, *, name: str | None = None,
                description: str | None = None, arg_types: dict[str, type] | None = None
                ) -> BaseTool:
        """The router as a tool whose output is readable text: the chosen answer and one line
        on how it was chosen (:func:`describe_decision`), not a Decision's repr."""
        decide = self.model_copy(update={"output": "decision"})
        readable = decide | RunnableLambda(describe_decision, name="describe_decision")
        return readable.as_tool(
            args_schema or TrustMarginInput, name=name or "trustmargin_router",
            description=description or "Choose between a closed-book and a retrieval-augmented "
            "answer to a question with TrustMargin; returns the chosen answer.",
            arg_types=arg_types)

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """``policy``, ``tau`` and ``lambda_bind``, settable per call under ``configurable``."""
        return list(CONFIG_SPECS)

    def call_policy(self, config: RunnableConfig | None = None) -> Policy:
        """The policy a call with ``config`` decides by (:func:`call_policy`)."""
        return call_policy(self.tm, config, {"policy": self.policy, "tau": self.tau,
                                             "lambda_bind": self.lambda_bind})

    # -- core call: raw inputs -> Decisions or per-input errors ------------------------------

    def _decide(self, values: list[Any], configs: list[RunnableConfig], *, fail_fast: bool,
                batched: bool) -> list[Decision | Exception]:
        out: list[Decision | Exception | None] = [None] * len(values)
        ready: list[tuple[int, PreparedQuestion, Policy]] = []
        for i, (value, config) in enumerate(zip(values, configs, strict=True)):
            where = f"inputs[{i}]" if batched else None
            try:
                policy = self.call_policy(config)
                item, names = core_input(value, where)
                # The core validates (and prepares) here, with the user's names and the
                # input's own batch position; arbitrate_batch takes the prepared question.
                prepared = self.tm.prepare(item, where=where, names=names)
            except InvalidInputError as exc:
                if fail_fast:
                    raise
                out[i] = exc
                continue
            ready.append((i, prepared, policy))
        if ready:
            decisions = self.tm.arbitrate_batch([item for _, item, _ in ready],
                                                include_prompts=self.include_prompts,
                                                policy=[policy for _, _, policy in ready])
            for (i, _, _), decision in zip(ready, decisions, strict=True):
                out[i] = decision
        return [cast("Decision | Exception", o) for o in out]

    def _route(self, values: list[Any], config: list[RunnableConfig], *, fail_fast: bool,
               batched: bool = True) -> list[Decision | str | Exception]:
        results = self._decide(values, config, fail_fast=fail_fast, batched=batched)
        for result, cfg in zip(results, config, strict=True):
            if isinstance(result, Decision):
                dispatch_custom_event(MARGINS_EVENT, margins_payload(result), config=cfg)
        return [self._shaped(r) for r in results]

    def _shaped(self, result: Decision | Exception) -> Decision | str | Exception:
        return result if isinstance(result, Exception) else shape_output(result, self.output)

    async def _aroute(self, values: list[Any], config: list[RunnableConfig], *,
                      fail_fast: bool, batched: bool = True) -> list[Decision | str | Exception]:
        results = await run_in_executor(None, self._decide, values, config,
                                        fail_fast=fail_fast, batched=batched)
        for result, cfg in zip(results, config, strict=True):
            if isinstance(result, Decision):
                await adispatch_custom_event(MARGINS_EVENT, margins_payload(result), config=cfg)
        return [self._shaped(r) for r in results]

    def _route_one(self, value: Any, config: RunnableConfig) -> Decision | str:
        results = self._route([value], [config], fail_fast=True, batched=False)
        return cast("Decision | str", results[0])

    async def _aroute_one(self, value: Any, config: RunnableConfig) -> Decision | str:
        results = await self._aroute([value], [config], fail_fast=True, batched=False)
        return cast("Decision | str", results[0])

    # -- Runnable API ------------------------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
               ) -> Any:
        """Arbitrate one input dict (as a LangGraph node: the graph's state, see
        :meth:`node_step`)."""
        if runs_as_node(input, config):
            return self.node_step(input, cast("RunnableConfig", config))
        return self._call_with_config(self._route_one, input, config, run_type="chain")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
                      ) -> Any:
        """Async :meth:`invoke` (scoring runs in a worker thread)."""
        if runs_as_node(input, config):
            return await self.anode_step(input, cast("RunnableConfig", config))
        return await self._acall_with_config(self._aroute_one, input, config,
                                             run_type="chain")

    # -- as a LangGraph node -----------------------------------------------------------------

    def node_step(self, state: Mapping[str, Any], config: RunnableConfig,
                  keys: StateKeys | None = None) -> dict[str, Any]:
        """Added to a graph as a node, the router reads the state with the default keys of
        :func:`~.graph.trustmargin_node` (``question`` or the last human message,
        ``direct_answer``, ``rag_answer``, ``documents`` or ``context``) and returns its
        state update (``answer``, ``decision``, ``margins``; :class:`~.graph.TrustMarginState`).
        Other key names: ``keys``, as ``trustmargin_node(router, question_key=...)`` passes
        them."""
        keys = keys or StateKeys()
        decide = self.model_copy(update={"output": "decision"})
        try:
            decision = cast("Decision", decide.invoke(keys.router_input(state),
                                                      inner_config(config)))
        except InvalidInputError as exc:
            raise keys.renamed(exc) from None
        return node_update(keys, state, decision)

    async def anode_step(self, state: Mapping[str, Any], config: RunnableConfig,
                         keys: StateKeys | None = None) -> dict[str, Any]:
        """Async :meth:`node_step`."""
        keys = keys or StateKeys()
        decide = self.model_copy(update={"output": "decision"})
        try:
            decision = cast("Decision", await decide.ainvoke(keys.router_input(state),
                                                             inner_config(config)))
        except InvalidInputError as exc:
            raise keys.renamed(exc) from None
        return node_update(keys, state, decision)

    def batch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig] | None
              = None, *, return_exceptions: bool = False, **kwargs: Any) -> list[Decision | str]:
        """Arbitrate many inputs with one ``arbitrate_batch`` call (not a thread per input).

        With ``return_exceptions=True`` an invalid input yields its ``InvalidInputError``
        in place and the others are still scored together.
        """
        return self._batch_with_config(self._route, inputs, config,
                                       return_exceptions=return_exceptions, run_type="chain",
                                       fail_fast=not return_exceptions)

    async def abatch(self, inputs: list[Any], config: RunnableConfig | list[RunnableConfig]
                     | None = None, *, return_exceptions: bool = False, **kwargs: Any
                     ) -> list[Decision | str]:
        """Async :meth:`batch`: one ``arbitrate_batch`` call in a worker thread."""
        return await self._abatch_with_config(self._aroute, inputs, config,
                                              return_exceptions=return_exceptions,
                                              run_type="chain", fail_fast=not return_exceptions)


