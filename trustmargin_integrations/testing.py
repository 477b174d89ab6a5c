"""A scripted backend for tests: the backend protocol with given answers and log-likelihoods.

:class:`ScriptedBackend` implements :class:`~trustmargin_integrations.backends.base.Backend`
without a model: what it generates and how it scores come from a script, so a test of a chain
that wraps TrustMargin (a LangChain runnable, a LlamaIndex engine, your own code) runs in
milliseconds, offline, and knows every margin in advance::

    backend = ScriptedBackend(
        answers={"question_only": "Lyon", "question_context": "Paris"},
        logprobs={("question_only", "Lyon"): -1.0, ("question_only", "Paris"): -2.0, ...},
    )
    tm = TrustMargin(backend)

It reads each prompt it is given back into the paper's view it was rendered from
(:class:`ScriptedPrompt`: ``question_only``, ``question_context``, ``context_only``, the
question-free prompt, the extraction prompt, or none for a free prompt), so a script names
views and questions, not rendered text. Its tokenizer is plain and predictable: a token is a
run of word characters or one other non-space character (``"Paris."`` is two tokens), so
token counts, truncation and ``max_new_tokens`` can be worked out by hand.

The numbers a script gives are per-token means (the paper's length-normalized ``l(y)``); the
backend returns them as a :class:`~trustmargin_integrations.backends.base.ContinuationScore`
of ``mean * tokens`` over ``tokens``, so the arbiter's margins are differences of the given
numbers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from trustmargin_integrations.backends.base import (
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    EngineDefaults,
    ModelSession,
    StopPredicate,
    cut_at_stop,
    plain_session,
)
from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.prompts import (
    CONTEXT_ONLY_TEMPLATE,
    EXTRACT_TEMPLATE,
    QUESTION_CONTEXT_TEMPLATE,
    QUESTION_ONLY_TEMPLATE,
)

__all__ = ["AnswerScript", "LogprobScript", "ScriptError", "ScriptedBackend", "ScriptedPrompt"]

_TOKEN = re.compile(r"\w+|[^\w\s]")

class ScriptError(LookupError):
    """The script has no answer or log-probability for a prompt the backend was given."""


@dataclass(frozen=True)
class ScriptedPrompt:
    """One rendered prompt as the scripted backend reads it back.

    Attributes:
        prompt: the prompt exactly as given (chat template and any scored prefix included).
        message: the user message inside the chat template (the whole prompt when it does
            not follow the template).
        view: ``"question_only"``, ``"question_context"``, ``"context_only"`` (the paper's
            three views), ``"question_free"`` (the question-only prompt with nothing asked),
            ``"extract"`` (the prompt that asks for a chat text's short answer), or None
            for any other prompt.
        question: the question the view asks (None where it asks none).
        context: the passage context of a view that has one, or the response an extraction
            prompt reads (None otherwise).
        prefix: text after the view's ``Answer:``: the part of a compared text scored before
            the continuation (empty for a whole answer).
    """

    prompt: str
    message: str
    view: str | None = None
    question: str | None = None
    context: str | None = None
    prefix: str = ""


AnswerScript = (Mapping[str | tuple[str, str], str]
                | Callable[[ScriptedPrompt], str])
"""What a scripted backend generates: a callable of the prompt, or a mapping looked up by
``(view, question)``, then ``view``, then the whole user message."""

LogprobScript = (Mapping[tuple[str, str] | tuple[str, str, str], float]
                 | Callable[[ScriptedPrompt, str], float])
"""How a scripted backend scores: a callable of (prompt, continuation) giving the mean
log-probability per token, or a mapping looked up by ``(view, question, continuation)``, then
``(view, continuation)``, then ``(message, continuation)``, each with the continuation as
given and then stripped of surrounding spaces."""


def _pattern(head: str, template: str, tail: str) -> re.Pattern[str]:
    """A regex reading one prompt template back (its ``{name}`` fields as groups) inside the
    chat template's ``head`` and ``tail``, with what follows it as ``prefix``."""
    parts = re.split(r"\{(\w+)\}", template)
    body = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.*?)"
                   for i, part in enumerate(parts))
    return re.compile(re.escape(head) + f"(?P<message>{body})" + re.escape(tail)
                      + "(?P<prefix>.*)", re.DOTALL)


class ScriptedBackend(EngineDefaults):
    """A :class:`~trustmargin_integrations.backends.base.Backend` that answers and scores
    from a script (no model, no network).

    Args:
        answers: what ``generate`` returns for each prompt (:data:`AnswerScript`). The
            arbiter generates Direct under ``"question_only"`` and RAG under
            ``"question_context"``. A generation is cut to ``max_new_tokens`` tokens and
            where the caller's stop predicate first holds, as a model's would be.
        logprobs: the mean log-probability per token of each scored continuation
            (:data:`LogprobScript`).
        default_logprob: the number for a continuation the script does not name (None: a
            :class:`ScriptError` naming what was looked up).
        model_id: the model the backend claims to be (recorded in every Decision).
        context_window: the window the arbiter budgets against (None: unknown, no cap).
        chat_template: how a user message is rendered; ``{message}`` marks where it goes.
        parameters: the model size the backend claims (``Capabilities.parameters``; None,
            the default: unknown, so not asked for extractions under
            ``scoring_form="auto"``, and a script names extraction answers only when it asks
            for them: 1B or more, or ``scoring_form="extract"``).

    ``generated`` and ``scored`` record every call in order (prompt read back, text or
    continuation), so a test can check what the arbiter asked for.
    """

    def __init__(
        self,
        answers: AnswerScript | None = None,
        logprobs: LogprobScript | None = None,
        *,
        default_logprob: float | None = None,
        model_id: str = "scripted",
        context_window: int | None = None,
        chat_template: str = "{message}",
        parameters: int | None = None,
    ) -> None:
        if chat_template.count("{message}") != 1:
            raise InvalidInputError("chat_template", f"must hold '{{message}}' once, got "
                                    f"{chat_template!r}", "write e.g. '<user>{message}</user>'")
        self.model_id = model_id
        self.context_window = context_window
        self.parameters = parameters
        self.answers = answers if answers is not None else {}
        self.logprobs = logprobs if logprobs is not None else {}
        self.default_logprob = default_logprob
        self._head, self._tail = chat_template.split("{message}")
        self._patterns = [
            ("question_only", _pattern(self._head, QUESTION_ONLY_TEMPLATE, self._tail)),
            ("question_context", _pattern(self._head, QUESTION_CONTEXT_TEMPLATE, self._tail)),
            ("context_only", _pattern(self._head, CONTEXT_ONLY_TEMPLATE, self._tail)),
            ("extract", _pattern(self._head, EXTRACT_TEMPLATE, self._tail)),
        ]
        self._lock = threading.Lock()  # adapters call from worker threads
        self.generated: list[tuple[ScriptedPrompt, str]] = []
        self.scored: list[tuple[ScriptedPrompt, str]] = []

    # -- what the backend is ----------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """Kind ``scripted``, the given ``model_id`` and ``parameters``."""
        return Capabilities(kind="scripted", model=self.model_id, parameters=self.parameters)

    def render_prompt(self, user_message: str) -> str:
        """The message inside the chat template."""
        return self._head + user_message + self._tail

    def read_prompt(self, prompt: str) -> ScriptedPrompt:
        """``prompt`` read back into its view, question and context (see
        :class:`ScriptedPrompt`)."""
        for view, pattern in self._patterns:
            found = pattern.fullmatch(prompt)
            if found is None:
                continue
            fields = found.groupdict()
            question = fields.get("question")
            if view == "question_only" and question == "":
                view, question = "question_free", None
            return ScriptedPrompt(prompt, fields["message"], view, question,
                                  fields.get("context", fields.get("response")),
                                  fields["prefix"])
        inside = (prompt.startswith(self._head) and prompt.endswith(self._tail)
                  and len(prompt) >= len(self._head) + len(self._tail))
        message = prompt[len(self._head):len(prompt) - len(self._tail)] if inside else prompt
        return ScriptedPrompt(prompt, message)

    # -- tokens -------------------------------------------------------------------------------

    @staticmethod
    def tokens(text: str) -> list[str]:
        """The tokens of ``text``: runs of word characters, and every other non-space
        character alone."""
        return _TOKEN.findall(text)

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` (:meth:`tokens`)."""
        return len(self.tokens(text))

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """``text`` up to the end of its ``max_tokens``-th token."""
        if max_tokens <= 0:
            return ""
        ends = [m.end() for m in _TOKEN.finditer(text)]
        return text if len(ends) <= max_tokens else text[:ends[max_tokens - 1]]

    # -- generation and scoring -------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Each prompt's scripted answer, cut to ``max_new_tokens`` tokens and at ``stop``."""
        out = []
        for prompt in prompts:
            read = self.read_prompt(prompt)
            text = cut_at_stop(self.truncate_tokens(self._answer(read), max_new_tokens), stop)
            with self._lock:
                self.generated.append((read, text))
            out.append(text)
        return out

    def score_continuations(self, requests: Sequence[ContinuationRequest]
                            ) -> list[ContinuationScore]:
        """Each continuation's scripted mean log-probability times its token count."""
        out = []
        for request in requests:
            read = self.read_prompt(request.prompt)
            n = self.count_tokens(request.continuation)
            mean = self._logprob(read, request.continuation) if n else 0.0
            with self._lock:
                self.scored.append((read, request.continuation))
            out.append(ContinuationScore(logprob_sum=mean * n, num_tokens=n))
        return out

    def session(self) -> AbstractContextManager[ModelSession]:
        """A plain session: generation and scoring share nothing."""
        return plain_session(self)

    # -- the script ---------------------------------------------------------------------------

    def _answer(self, read: ScriptedPrompt) -> str:
        if callable(self.answers):
            return self.answers(read)
        keys: list[str | tuple[str, str]] = []
        if read.view is not None:
            if read.question is not None:
                keys.append((read.view, read.question))
            keys.append(read.view)
        keys.append(read.message)
        for key in keys:
            if key in self.answers:
                return self.answers[key]
        raise ScriptError(f"no scripted answer for a {read.view or 'free'} prompt; looked up "
                          f"{keys!r}")

    def _logprob(self, read: ScriptedPrompt, continuation: str) -> float:
        if callable(self.logprobs):
            return float(self.logprobs(read, continuation))
        keys: list[tuple[str, str] | tuple[str, str, str]] = []
        # A compared piece is scored with its leading space (" Lyon" after "It is"); a
        # script names the words.
        for text in dict.fromkeys((continuation, continuation.strip())):
            if read.view is not None:
                if read.question is not None:
                    keys.append((read.view, read.question, text))
                keys.append((read.view, text))
            keys.append((read.message, text))
        for key in keys:
            if key in self.logprobs:
                return float(self.logprobs[key])
        if self.default_logprob is not None:
            return self.default_logprob
        raise ScriptError(f"no scripted log-probability for {continuation!r} under a "
                          f"{read.view or 'free'} prompt; looked up {keys!r}")
