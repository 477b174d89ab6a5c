"""What every candidate-source pipeline shares: the audit trace, the protocol, the registry,
parameter checks and the passage-context helper.

A pipeline turns a question into one retrieval-side answer plus the trace of how it got
there (every retrieval, generation and decision). The answer is a *candidate*: TrustMargin
can arbitrate between it and the closed-book Direct answer, and
:meth:`PipelineResult.to_metadata` is the JSON trace to store beside that Decision.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from tqdm.auto import tqdm

from trustmargin_integrations.backends.base import Backend, TokenDecoder
from trustmargin_integrations.context import build_context, context_room
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import format_passage, join_passages, view_texts
from trustmargin_integrations.retrieval.base import Retriever, retrieve_batch
from trustmargin_integrations.schema import Passage, PassageRef
from trustmargin_integrations.validation import check_question

# -- the trace ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineStep:
    """One step of a pipeline run.

    Attributes:
        kind: what happened: ``"retrieve"`` (a search), ``"reason"`` (an IRCoT reasoning
            sentence), ``"generate"`` (an answer, a look-ahead sentence or a pseudo-passage),
            ``"decode"`` (CLeHe's joint decoding), ``"read"`` (IRCoT's fallback reader) or
            ``"decide"`` (a control decision: FLARE's confidence check, DTR's threshold).
        query: the search query of a retrieval (None otherwise).
        text: the generated text of a generation step (None otherwise).
        passages: the passages the step returned or was conditioned on, in rank order.
        extra: step-specific JSON data (token probabilities, weights, thresholds...).
    """

    kind: str
    query: str | None = None
    text: str | None = None
    passages: list[PassageRef] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, Any]:
        """The step as JSON data."""
        return json_safe({"kind": self.kind, "query": self.query, "text": self.text,
                          "passages": [p.model_dump() for p in self.passages],
                          "extra": self.extra})


@dataclass(frozen=True)
class PipelineResult:
    """A pipeline's answer to one question with its full audit trace.

    Attributes:
        pipeline: the pipeline's registry name.
        question: the question as given.
        answer: the raw final answer text (the arbiter cleans candidates itself).
        steps: every step, in order.
        passages: the evidence the final answer was conditioned on (empty when none).
        retrieved: True when the final answer was conditioned on retrieved passages.
        seconds: wall-clock seconds for this question (a batch's time split evenly).
        params: every parameter in force.
    """

    pipeline: str
    question: str
    answer: str
    steps: list[PipelineStep]
    passages: list[Passage]
    retrieved: bool
    seconds: float
    params: dict[str, Any]

    def steps_of(self, kind: str) -> list[PipelineStep]:
        """The steps of one kind, in order."""
        return [s for s in self.steps if s.kind == kind]

    def to_metadata(self) -> dict[str, Any]:
        """The whole trace as JSON data (non-finite floats become None), e.g. for a
        Decision's ``metadata``; passages appear by reference (rank, id, title, score)."""
        return json_safe({
            "pipeline": self.pipeline, "question": self.question, "answer": self.answer,
            "retrieved": self.retrieved, "seconds": self.seconds, "params": self.params,
            "passages": [p.model_dump() for p in refs(self.passages)],
            "steps": [s.to_metadata() for s in self.steps],
        })


def refs(passages: Sequence[Passage]) -> list[PassageRef]:
    """Rank, id, title and score of each passage (what a trace keeps of it)."""
    return [PassageRef(rank=i, id=p.id, title=p.title, score=p.score)
            for i, p in enumerate(passages)]


def json_safe(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


# -- the protocol and the registry --------------------------------------------------------------


@runtime_checkable
class Pipeline(Protocol):
    """A training-free RAG pipeline used as a candidate source."""

    name: str

    def params(self) -> dict[str, Any]:
        """Every parameter in force, by name."""
        ...

    def run(self, question: str) -> PipelineResult:
        """Answer one question."""
        ...

    def run_batch(self, questions: Sequence[str], progress: bool = False) -> list[PipelineResult]:
        """Answer several questions (in order)."""
        ...


PIPELINES: dict[str, type[BasePipeline]] = {}
"""Registry name -> pipeline class (filled by :func:`register`)."""

_P = TypeVar("_P", bound="type[BasePipeline]")


def register(cls: _P) -> _P:
    """Class decorator: list a pipeline in :data:`PIPELINES` under its ``name``."""
    PIPELINES[cls.name] = cls
    return cls


def build_pipeline(name: str, backend: Backend, retriever: Retriever,
                   **params: Any) -> BasePipeline:
    """The pipeline registered as ``name``, built with ``params``.

    Raises:
        InvalidInputError: for an unknown name (the valid names are listed), a parameter the
            pipeline does not have (its parameters are listed) or a bad value (the parameter
            is named).
    """
    try:
        cls = PIPELINES[name]
    except (KeyError, TypeError):
        raise InvalidInputError("pipeline", f"{name!r} is not a known pipeline",
                                f"use one of {sorted(PIPELINES)}") from None
    accepted = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    for key in params:
        if key not in accepted:
            raise InvalidInputError(key, f"is not a parameter of the {name} pipeline",
                                    f"use only {accepted}")
    return cls(backend, retriever, **params)


# -- parameter checks ---------------------------------------------------------------------------


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum`` (bools refused), else a typed error."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(name, f"must be an integer >= {minimum}, got {value!r}",
                                f"pass an integer {name} of at least {minimum}")
    return value


def check_float(name: str, value: Any, low: float | None = None, high: float | None = None,
                *, low_open: bool = True, high_open: bool = True) -> float:
    """``value`` as a finite float within the bounds (open unless told), else a typed error."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and math.isfinite(value))
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        span = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        raise InvalidInputError(name, f"must be a finite number in {span}, got {value!r}",
                                f"pass a {name} in {span}")
    return float(value)


def check_questions(questions: Sequence[str]) -> list[str]:
    """The questions as a list, each checked as the arbiter checks a question
    (:func:`~trustmargin_integrations.validation.check_question`: a string with a visible
    character, control characters removed, stripped)."""
    if isinstance(questions, str):
        raise InvalidInputError("questions", "is a single string",
                                "pass a list of questions (or call run(question))")
    return [check_question(q, f"questions[{i}]") for i, q in enumerate(questions)]


# -- shared machinery ---------------------------------------------------------------------------


class BasePipeline:
    """Common constructor checks, batching, timing and context building.

    Subclasses set ``name``, store their parameters, return them from :meth:`params` and
    implement :meth:`_run_chunk` over at most :attr:`chunk_size` questions.
    """

    name: ClassVar[str] = ""
    chunk_size: int = 1
    """Questions per :meth:`_run_chunk` call (pipelines that batch model calls raise it)."""
    max_context_tokens: int
    """Token budget of a prompt's passage context (each pipeline sets it from its argument)."""

    def __init__(self, backend: Backend, retriever: Retriever) -> None:
        if not isinstance(backend, Backend):
            raise InvalidInputError("backend", f"a {type(backend).__name__} is not a Backend",
                                    "pass an HFBackend or another Backend implementation")
        if not callable(getattr(retriever, "search", None)):
            raise InvalidInputError("retriever", f"a {type(retriever).__name__} has no "
                                    "search(query, k) method",
                                    "pass a BM25Index or any object with search(query, k)")
        self.backend = backend
        self.retriever = retriever

    def params(self) -> dict[str, Any]:
        """Every parameter in force, by name."""
        raise NotImplementedError

    def run(self, question: str) -> PipelineResult:
        """Answer one question (see the class docstring for the algorithm)."""
        return self.run_batch([question])[0]

    def run_batch(self, questions: Sequence[str], progress: bool = False) -> list[PipelineResult]:
        """Answer several questions in order, ``chunk_size`` at a time."""
        qs = check_questions(questions)
        out: list[PipelineResult] = []
        with tqdm(total=len(qs), desc=self.name, unit="q", disable=not progress) as bar:
            for chunk in chunks(qs, self.chunk_size):
                out.extend(self._run_chunk(chunk))
                bar.update(len(chunk))
        return out

    def _run_chunk(self, questions: list[str]) -> list[PipelineResult]:
        raise NotImplementedError

    def _result(self, question: str, answer: str, steps: list[PipelineStep],
                passages: Sequence[Passage], retrieved: bool, seconds: float) -> PipelineResult:
        return PipelineResult(self.name, question, answer, steps, list(passages), retrieved,
                              seconds, self.params())

    def _search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-``k`` passages of every query (one batched call when the retriever has one)."""
        return retrieve_batch(self.retriever, queries, k) if queries else []

    def _prompt_over_fitting(
        self, question: str, passages: Sequence[Passage], reserve: int,
        message: Callable[[str, str], str] | None = None,
    ) -> tuple[str, list[Passage]]:
        """The rendered prompt over the leading passages that fit, and those passages.

        ``message(question, context)`` is the user message (default: the paper's
        question+context view); ``reserve`` is how many tokens will be generated after it.
        """
        message = message or rag_message
        fixed = self.backend.render_prompt(message(question, ""))
        used = self._fit(passages, fixed, reserve)
        return self.backend.render_prompt(message(question, context_text(used))), used

    def _fit(self, passages: Sequence[Passage], fixed_prompt: str,
             reserve: int) -> list[Passage]:
        """The leading passages whose context fits the budget.

        The budget is ``max_context_tokens``, lowered so that ``fixed_prompt`` (the rendered
        prompt with an empty context) plus ``reserve`` generated tokens fit the model's window
        (:func:`~trustmargin_integrations.context.context_room`). Whole passages are dropped
        from the end; a first passage longer than the budget is cut (its text is replaced by
        the truncated text).
        """
        if not passages:
            return []
        budget = self.max_context_tokens
        window = self.backend.context_window
        if window:
            room = context_room(window, self.backend.count_tokens(fixed_prompt), reserve)
            if room is None:
                raise InvalidInputError("question", f"is too long for the model's {window}-"
                                        "token window", "shorten the question")
            budget = min(budget, room)
        texts = [p.as_context() for p in passages]
        built = build_context(texts, self.backend.count_tokens, budget,
                              self.backend.truncate_tokens,
                              self.backend.count_tokens_batch)
        kept = list(passages[:built.passages_used])
        if built.truncated:
            # build_context cut the first passage's "title: text" line; keep what is left of
            # it as the passage's text so that the context string comes out the same.
            head = built.text[len(format_passage(0, "")):]
            kept = [passages[0].model_copy(update={"title": "", "text": head})]
        return kept


def chunks(items: list[str], size: int) -> Iterator[list[str]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def rag_message(question: str, context: str) -> str:
    """The paper's question+context view of ``question`` over ``context`` (not rendered)."""
    return view_texts(question, context).question_context


def context_text(passages: Sequence[Passage]) -> str:
    """The paper's context string for passages (``Passage i: title: text`` lines)."""
    return join_passages([p.as_context() for p in passages])


def dedupe(passages: Sequence[Passage]) -> list[Passage]:
    """Passages in order, the first occurrence of each id kept."""
    seen: set[str] = set()
    out = []
    for p in passages:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


def require_token_decoder(backend: Any, pipeline: str, needs: str) -> TokenDecoder:
    """``backend`` when it decodes token by token (a
    :class:`~trustmargin_integrations.backends.base.TokenDecoder`, such as ``HFBackend``), else
    a typed error naming the fix (``needs`` says what the pipeline reads off the model)."""
    if not isinstance(backend, TokenDecoder):
        raise InvalidInputError(
            "backend", f"the {pipeline} pipeline needs {needs} of a local transformers model, "
            f"which a {type(backend).__name__} does not expose",
            "pass an HFBackend (HFBackend.load(model)) or another TokenDecoder, or use the "
            "'ircot' or 'dtr' pipeline, which work with any Backend")
    return backend
