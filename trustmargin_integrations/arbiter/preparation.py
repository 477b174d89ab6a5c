"""Preparation, the stage before any model call: a validated input's context budget (the
model's window applied, :func:`~trustmargin_integrations.context.context_room`), its passage
context and its three rendered prompt views."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trustmargin_integrations.backends.base import Backend
from trustmargin_integrations.config import TrustMarginConfig
from trustmargin_integrations.context import (
    BuiltContext,
    build_contexts,
    context_room,
    tokens_before_context,
)
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import view_texts
from trustmargin_integrations.schema import ViewPrompts
from trustmargin_integrations.validation import ArbitrationInput, FieldNames

VIEWS = ("question_only", "question_context", "context_only")
"""The three prompt views, in the order they are rendered and scored."""


@dataclass(frozen=True)
class PreparedQuestion:
    """A validated question with its context and rendered views (before any model call).

    ``warnings`` are the input's (what validation changed) followed by preparation's (a
    context cut or capped to fit); nothing adds to them later: the stages after this one
    return their own, and the Decision collects them all (:mod:`.decision`).
    """

    input: ArbitrationInput
    context: BuiltContext
    views: ViewPrompts
    warnings: tuple[str, ...] = ()

    @property
    def has_evidence(self) -> bool:
        """At least one passage entered the context."""
        return self.context.passages_used > 0


@dataclass(frozen=True)
class _Budget:
    """One input's context budget in tokens, and the warning when the window capped it."""

    tokens: int
    capped: str | None = None


def prepare_valid(backend: Backend, config: TrustMarginConfig,
                  inputs: Sequence[ArbitrationInput],
                  names: Sequence[FieldNames]) -> list[PreparedQuestion]:
    """Budgets, contexts and views of validated inputs, with one tokenizer call per stage
    for all of them (see :func:`~trustmargin_integrations.context.build_contexts`).
    ``names[i]`` names input ``i``'s fields in an error (the input's batch place, the
    caller's key names)."""
    budgets = context_budgets(backend, config, inputs, names)
    contexts = build_contexts([valid.contexts for valid in inputs],
                              [b.tokens for b in budgets],
                              backend.count_tokens, backend.truncate_tokens,
                              backend.count_tokens_batch)
    render = backend.render_prompt
    prepared = []
    for valid, budget, context in zip(inputs, budgets, contexts, strict=True):
        warnings = [*valid.warnings, *([budget.capped] if budget.capped else [])]
        if context.truncated:
            warnings.append(
                f"passages[0]: cut to {context.num_tokens} tokens to fit the context "
                f"budget of {budget.tokens} tokens"
            )
        elif context.passages_used < context.passages_given:
            warnings.append(
                f"passages: used {context.passages_used} of {context.passages_given} to "
                f"fit the context budget of {budget.tokens} tokens"
            )
        texts = view_texts(valid.question, context.text)
        views = ViewPrompts(**{v: render(getattr(texts, v)) for v in VIEWS})
        prepared.append(PreparedQuestion(valid, context, views, tuple(warnings)))
    return prepared


def context_budgets(backend: Backend, config: TrustMarginConfig,
                    inputs: Sequence[ArbitrationInput],
                    names: Sequence[FieldNames]) -> list[_Budget]:
    """Each input's ``max_context_tokens``, capped so its longest prompt plus generation
    fits the model's window; a question that cannot fit at all is a typed error."""
    window = backend.context_window
    if not window:
        return [_Budget(config.max_context_tokens)] * len(inputs)
    render = backend.render_prompt
    plans = []  # per input: its given candidates (field name, text) and its fixed prompts
    texts: list[str] = []
    for valid, name in zip(inputs, names, strict=True):
        views = view_texts(valid.question, "")
        given = [(name(key), getattr(valid, key)) for key in ("direct_answer", "rag_answer")]
        given += [(name("rag_candidates", f"[{i}]"), text)
                  for i, (_, text) in enumerate(valid.rag_candidates or [])]
        given = [(field_name, text) for field_name, text in given if text]
        plans.append((len(texts), given))
        texts += [render(views.question_only), render(views.question_context)]
        texts += [text for _, text in given]
    counts = backend.count_tokens_batch(texts)
    return [_capped_budget(config, name("question"), window, counts[at:at + 2 + len(given)],
                           given)
            for name, (at, given) in zip(names, plans, strict=True)]


def _capped_budget(config: TrustMarginConfig, question_field: str, window: int,
                   counts: Sequence[int], given: Sequence[tuple[str, str]]) -> _Budget:
    """One input's budget from its counted prompts (question-only, question+empty
    context) and given candidates."""
    budget = config.max_context_tokens
    # A given candidate is scored after every prompt, so it needs the room that
    # generation would otherwise take (cleaning can only shorten it).
    answer = config.max_new_tokens
    for (field_name, _), size in zip(given, counts[2:], strict=True):
        if size > window // 2:
            raise InvalidInputError(
                field_name,
                f"is {size} tokens, too long to score in the model's {window}-token window",
                "pass the short answer (a phrase), not a document")
        answer = max(answer, size)
    question_only = counts[0]
    room = context_room(window, counts[1], answer)
    if question_only + answer > window or room is None:
        fixed = tokens_before_context(counts[1], answer)
        raise InvalidInputError(
            question_field,
            f"is too long: its prompts take {max(question_only, fixed)} of the model's "
            f"{window}-token window before any passage",
            "shorten the question (or use a model with a longer window)")
    if room < budget:
        return _Budget(room, f"passages: context budget capped at {room} "
                             f"tokens to fit the model's {window}-token window")
    return _Budget(budget)
