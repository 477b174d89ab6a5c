"""``Fleet``: one Backend over several servers of the same model, several requests in flight each.

Each ``generate`` / ``score_continuations`` request goes to the least busy member with a free
slot (at most ``in_flight`` per member); results come back in the caller's order and are
one server's (the members are checked to agree on first use and after every call). A member
that is unavailable for good is retired and its work goes to the others. Why the results are
one server's, and the limits of the check: docs/decisions.md and docs/scale_out.md.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from trustmargin_integrations.backends.base import (
    Backend,
    Capabilities,
    ContinuationRequest,
    ContinuationScore,
    ModelSession,
    StopPredicate,
    plain_session,
)
from trustmargin_integrations.errors import (
    InvalidInputError,
    MixedFleetError,
    ServerUnavailableError,
)
from trustmargin_integrations.urls import redact_url
from trustmargin_integrations.validation import check_items

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

PROBE_MESSAGE = "What is the capital of France?"
"""The user message every member renders, generates from and scores on (a question any model
answers the same way twice; its exact wording only has to be fixed)."""
PROBE_ANSWER = "Paris is the capital of France."
PROBE_TOLERANCE = 0.05
"""Largest gap between two members' length-normalized probe likelihoods (nats per token);
the measured gaps it sits between: docs/decisions.md, "A fleet's results are one server's"."""


def member_name(member: Backend, index: int) -> str:
    """How errors and logs name a member: its server URL without credentials, or its place."""
    url = getattr(member, "url", None)  # a server's; other engines have none
    if isinstance(url, str) and url:
        return redact_url(url)
    return f"backends[{index}] ({type(member).__name__})"


class Fleet:
    """Spread one model's requests over several backends serving it, ``in_flight`` per member.

    Args:
        backends: the members, each a Backend serving the same model (e.g. one
            :class:`~trustmargin_integrations.backends.openai_compat.OpenAICompatBackend` per
            server; give each ``max_concurrency >= in_flight`` so its connection pool does
            not hold requests back).
        in_flight: requests in flight per member at once (vLLM and llama.cpp servers batch
            concurrent requests; llama-cpp-python serves one at a time, so 2 keeps it busy).
        probe_tolerance: largest gap between two members' probe likelihoods (see
            :data:`PROBE_TOLERANCE`).

    Raises:
        InvalidInputError: no member, a member that is not a Backend, the same server twice,
            or ``in_flight`` below 1.
        MixedFleetError: members that do not serve the same model (here, or on first use).

    Example:
        >>> servers = [OpenAICompatBackend(url, "smollm2", "smollm2-135m",  # doctest: +SKIP
        ...                                max_concurrency=4) for url in urls]
        >>> TrustMargin(Fleet(servers, in_flight=4)).arbitrate_batch(questions)  # doctest: +SKIP
    """

    def __init__(self, backends: Sequence[Backend], in_flight: int = 4, *,
                 probe_tolerance: float = PROBE_TOLERANCE) -> None:
        members: list[Backend] = check_items(
            backends, "backends", Backend, what="backends", empty_fix="give at least one backend",
            item_fix="pass backends such as OpenAICompatBackend, one per server")
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
            raise InvalidInputError("in_flight", f"must be a whole number >= 1, got "
                                    f"{in_flight!r}", "allow at least one request in flight "
                                    "per server")
        if not isinstance(probe_tolerance, (int, float)) or not probe_tolerance >= 0:
            raise InvalidInputError("probe_tolerance", f"must be a number >= 0, got "
                                    f"{probe_tolerance!r}", "leave the default")
        self.members: tuple[Backend, ...] = tuple(members)
        self.names: tuple[str, ...] = tuple(member_name(m, i) for i, m in enumerate(members))
        _refuse_same_server_twice(self.names)
        _check_same_model_locally(self.members, self.names)
        self.model_id: str = members[0].model_id
        self.context_window: int | None = members[0].context_window
        self.in_flight = in_flight
        self.probe_tolerance = float(probe_tolerance)
        # A hand-written scheduler (a Condition over per-member counters): the thread pool and
        # the caller's order come from concurrent.futures, but no library offers "least busy
        # member with a free slot, skipping retired members, waking waiters when one retires".
        self._ready = threading.Condition()
        self._busy = [0] * len(members)
        self._answered = [0] * len(members)
        self._retired: dict[int, str] = {}
        self._verify_lock = threading.Lock()
        self._verified = False
        self._reference = math.nan  # the probe likelihood the members agreed on

    def __repr__(self) -> str:
        return f"Fleet({list(self.names)!r}, in_flight={self.in_flight})"

    # -- what the fleet reports -----------------------------------------------------------------

    @property
    def retired(self) -> dict[str, str]:
        """Members taken out of service, and why (their last error, without secrets)."""
        with self._ready:
            return {self.names[i]: reason for i, reason in self._retired.items()}

    def answered(self) -> dict[str, int]:
        """Requests each member has answered so far (probes included)."""
        with self._ready:
            return dict(zip(self.names, self._answered, strict=True))

    # -- text and tokens: one tokenizer, checked equal on every member ------------------------

    def render_prompt(self, user_message: str) -> str:
        """The members' chat template (they render the probe identically)."""
        return self.members[0].render_prompt(user_message)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` by the members' tokenizer."""
        return self.members[0].count_tokens(text)

    def count_tokens_batch(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, batched where the members' tokenizer can."""
        return self.members[0].count_tokens_batch(texts)

    @property
    def capabilities(self) -> Capabilities:
        """The members' (checked to serve one model): a run's cache keys are those of a
        single server, whichever member answered."""
        return self.members[0].capabilities

    def batches(self, lengths: Sequence[int], size: int) -> list[list[int]]:
        """The members' grouping of requests into calls."""
        return self.members[0].batches(lengths, size)

    def truncate_tokens(self, text: str, max_tokens: int) -> str:
        """The first ``max_tokens`` tokens of ``text``, as text."""
        return self.members[0].truncate_tokens(text, max_tokens)

    # -- requests ---------------------------------------------------------------------------

    def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                 stop: StopPredicate | None = None) -> list[str]:
        """Greedy continuations, one request per prompt, spread over the members."""
        return self._spread(list(prompts), lambda member, prompt: member.generate(
            [prompt], max_new_tokens, stop=stop)[0])

    def score_continuations(
        self, requests: Sequence[ContinuationRequest]
    ) -> list[ContinuationScore]:
        """Log-likelihoods, one request per continuation, spread over the members."""
        return self._spread(list(requests),
                            lambda member, request: member.score_continuations([request])[0])

    def session(self) -> AbstractContextManager[ModelSession]:
        """Generation and scoring through the fleet (a server has nothing to share)."""
        return plain_session(self)

    def verify(self) -> None:
        """Check once that every member serves the same model (the first request does it):
        each scores the probe continuation, and the likelihoods must agree within
        ``probe_tolerance``. A member unavailable now is retired, as in a run.

        Raises:
            MixedFleetError: two members answered the probe differently.
            ServerUnavailableError: no member answered.
        """
        with self._verify_lock:
            if self._verified:
                return
            prompt = self.render_prompt(PROBE_MESSAGE)
            request = ContinuationRequest(prompt, PROBE_ANSWER)

            def probe(index: int) -> float | None:
                try:
                    score = self.members[index].score_continuations([request])[0]
                except ServerUnavailableError as exc:
                    self._retire(index, exc)
                    return None
                with self._ready:
                    self._answered[index] += 1
                return score.mean

            with ThreadPoolExecutor(max_workers=len(self.members),
                                    thread_name_prefix="trustmargin-fleet-probe") as pool:
                answers = list(pool.map(probe, range(len(self.members))))
            self._compare_probes(answers)
            if len(self._retired) == len(self.members):
                raise self._nobody_left()
            self._reference = next(mean for mean in answers if mean is not None)
            self._verified = True

    def _compare_probes(self, means: Sequence[float | None]) -> None:
        answered = [(i, mean) for i, mean in enumerate(means) if mean is not None]
        if not answered:
            return
        first, mean = answered[0]
        for index, other in answered[1:]:
            gap = abs(other - mean)
            if not math.isfinite(gap) or gap > self.probe_tolerance:
                raise MixedFleetError(
                    "backends", f"{self.names[first]} and {self.names[index]} do not serve "
                    f"the same model: they scored the same probe continuation {mean:.6f} and "
                    f"{other:.6f} nats per token (allowed gap {self.probe_tolerance:g})",
                    "give the fleet servers that serve the same model file with the same "
                    "settings (quantization, context, RoPE); run other models as separate "
                    "fleets")

    def _spread(self, items: list[_T], call: Callable[[Backend, _T], _R]) -> list[_R]:
        """``call(member, item)`` for every item on a free member, results in item order.

        Before the results are returned, every member that answered some of them scores the
        probe again (:meth:`_recheck`); the items of a member whose probe moved, or that went
        down, are computed again on the members left, until every result comes from a member
        checked after it answered."""
        self.verify()
        results, by = self._run(items, call)
        while by:
            drifted = self._recheck(set(by))
            redo = [i for i, index in enumerate(by) if index in drifted]
            if not redo:
                break
            again, again_by = self._run([items[i] for i in redo], call)
            for i, result, index in zip(redo, again, again_by, strict=True):
                results[i], by[i] = result, index
        return results

    def _run(self, items: list[_T], call: Callable[[Backend, _T], _R]
             ) -> tuple[list[_R], list[int]]:
        """Each item's result and the member that answered it."""
        if not items:
            return [], []
        workers = min(len(items), self.in_flight * len(self.members))
        if workers == 1:
            pairs = [self._on_a_member(call, item) for item in items]
        else:
            # Executor.map yields in submission order and cancels what has not started once
            # a result raises, so a failing request stops the call without waiting for the
            # rest.
            with ThreadPoolExecutor(max_workers=workers,
                                    thread_name_prefix="trustmargin-fleet") as pool:
                pairs = list(pool.map(lambda item: self._on_a_member(call, item), items))
        return [result for result, _ in pairs], [index for _, index in pairs]

    def _recheck(self, indices: set[int]) -> set[int]:
        """Score the probe again on each member in ``indices``; retire, with a warning, each
        whose likelihood moved more than ``probe_tolerance`` from the one the members agreed
        on, or that is unavailable. Returns the members retired."""
        request = ContinuationRequest(self.render_prompt(PROBE_MESSAGE), PROBE_ANSWER)

        def check(index: int) -> bool:
            # The probe takes one of the member's slots like any request, or another caller's
            # requests plus this probe would exceed in_flight on that server.
            if not self._acquire_slot_on(index):
                return False
            try:
                mean = self.members[index].score_continuations([request])[0].mean
            except ServerUnavailableError as exc:
                self._retire(index, exc)
                return False
            finally:
                self._release(index)
            gap = abs(mean - self._reference)
            if math.isfinite(gap) and gap <= self.probe_tolerance:
                return True
            self._retire(index, f"its answers drifted: the probe scored {mean:.6f} nats per "
                                f"token, {self._reference:.6f} when the fleet was checked "
                                f"(allowed gap {self.probe_tolerance:g}); its answers since "
                                f"its last good check were computed again on the others")
            return False

        live = sorted(indices)
        with ThreadPoolExecutor(max_workers=len(live),
                                thread_name_prefix="trustmargin-fleet-recheck") as pool:
            kept = list(pool.map(check, live))
        return {index for index, ok in zip(live, kept, strict=True) if not ok}

    def _on_a_member(self, call: Callable[[Backend, _T], _R], item: _T) -> tuple[_R, int]:
        """One request on the least busy live member; on another when that one is down.
        Returns the result and the member that answered."""
        while True:
            index = self._acquire()
            try:
                result = call(self.members[index], item)
            except ServerUnavailableError as exc:
                self._retire(index, exc)
                continue
            finally:
                self._release(index)
            with self._ready:
                self._answered[index] += 1
            return result, index

    def _acquire(self) -> int:
        with self._ready:
            while True:
                live = [i for i in range(len(self.members)) if i not in self._retired]
                if not live:
                    raise self._nobody_left()
                free = [i for i in live if self._busy[i] < self.in_flight]
                if free:
                    index = min(free, key=lambda i: self._busy[i])
                    self._busy[index] += 1
                    return index
                self._ready.wait()

    def _acquire_slot_on(self, index: int) -> bool:
        """Wait for a free slot on member ``index``; False when it was retired meanwhile."""
        with self._ready:
            while index not in self._retired:
                if self._busy[index] < self.in_flight:
                    self._busy[index] += 1
                    return True
                self._ready.wait()
            return False

    def _release(self, index: int) -> None:
        with self._ready:
            self._busy[index] -= 1
            self._ready.notify_all()  # waiters for one member and for any share the condition

    def _retire(self, index: int, failure: ServerUnavailableError | str) -> None:
        with self._ready:
            if index not in self._retired:
                self._retired[index] = str(failure)
                left = len(self.members) - len(self._retired)
                logger.warning("retiring %s from the fleet (%d member(s) left): %s",
                               self.names[index], left, failure)
            # Waiters may be waiting for this member's slots: let them choose again.
            self._ready.notify_all()

    def _nobody_left(self) -> ServerUnavailableError:
        reasons = "; ".join(f"{self.names[i]}: {why}" for i, why in sorted(self._retired.items()))
        return ServerUnavailableError(
            f"every server of the fleet is unavailable ({reasons}). Fix: bring a server back "
            f"and run again (an evaluation resumes from its result store)")

    def close(self) -> None:
        """Close every member that holds connections."""
        for member in self.members:
            close = getattr(member, "close", None)  # servers hold connection pools
            if callable(close):
                close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refuse_same_server_twice(names: Sequence[str]) -> None:
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            raise InvalidInputError(f"backends[{index}]", f"is {name} again (as "
                                    f"backends[{seen[name]}])", "list each server once; raise "
                                    "in_flight for more requests per server")
        seen[name] = index


def _check_same_model_locally(members: Sequence[Backend], names: Sequence[str]) -> None:
    """Model ids, chat template, token counts and window, compared without any request."""
    def facts(member: Backend) -> dict[str, Any]:
        prompt = member.render_prompt(PROBE_MESSAGE)
        return {"model_id": member.model_id, "chat template": prompt,
                "token count": (member.count_tokens(prompt), member.count_tokens(PROBE_ANSWER)),
                "context window": member.context_window}

    first = facts(members[0])
    for index, member in enumerate(members[1:], 1):
        other = facts(member)
        for what, value in first.items():
            if other[what] != value:
                raise MixedFleetError(
                    "backends", f"{names[0]} and {names[index]} differ in their {what} "
                    f"({value!r} vs {other[what]!r})",
                    "build every member for the same model (same model_id, tokenizer and "
                    "context window); run other models as separate fleets")
