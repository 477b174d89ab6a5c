"""Test instrumentation shared by the reliability suites: a hang watchdog and a backend
wrapper that fails the test when the arbiter sends the model more than its window."""

from __future__ import annotations

import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


class Hang(BaseException):
    """A call that ran past its time limit (BaseException: no ``except Exception`` in the
    code under test can swallow it)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the block once ``seconds`` have passed."""
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no result and no error within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class OverWindowError(AssertionError):
    """The arbiter sent the model a request longer than the model's window."""


class WindowGuard:
    """The real backend; its sessions refuse (as a test failure) any request longer than the
    model's window before the model computes it (instrumentation: every call still goes to
    the real model). Without it an over-window request costs minutes and gigabytes on CPU."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check(self, what: str, tokens: int) -> None:
        window = self.inner.context_window
        if tokens > window:
            raise OverWindowError(f"the arbiter asked the model to {what} {tokens} tokens in "
                                  f"a {window}-token window")

    @contextmanager
    def session(self) -> Iterator[Any]:
        count = self.inner.count_tokens
        guard = self

        with self.inner.session() as inner:
            class Guarded:
                def generate(self, prompts: Sequence[str], max_new_tokens: int, *,
                             stop: Any = None) -> list[str]:
                    for prompt in prompts:
                        guard._check("generate after", count(prompt) + max_new_tokens)
                    return inner.generate(prompts, max_new_tokens, stop=stop)

                def score(self, requests: Sequence[Any]) -> Any:
                    for req in requests:
                        guard._check("score", count(req.prompt) + count(req.continuation))
                    return inner.score(requests)

            yield Guarded()
