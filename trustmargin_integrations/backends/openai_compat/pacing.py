"""Work in flight on one server sized to its deadline, from the throughput it has shown.

The :class:`Pacer` sends a request only when the work already in flight on the server, plus
its own, fits half the deadline at the server's measured pace (busy seconds per unit of work,
weights decaying by :data:`DECAY` per answer); the others wait here, where no deadline runs.
When a request fails for good, the requests queued behind it fail at once. Why, with the
failure that led to it: docs/decisions.md and docs/scale_out.md, "Bounded waits".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SHARE = 0.5
"""The share of a request's deadline the work in flight before and with it may take at the
measured pace (the rest absorbs the pace's error and a retry)."""
DECAY = 0.8
"""Weight of the pace measured so far at each new answer (recent answers count most)."""


class QueuedBehindFailureError(Exception):
    """A queued request was not sent: one sent before it to the same server failed for
    good."""


class Pacer:
    """Admit requests to one server while their work fits ``SHARE`` of ``bound_s``.

    Args:
        bound_s: the deadline a request has once sent (the smaller of the total timeout and
            the read timeout: a waiting request hears nothing until its answer).
    """

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._ready = threading.Condition()
        self._units = 0
        self._count = 0
        self._since = time.monotonic()
        self._busy_s = 0.0
        self._done = 0.0
        self._failures = 0

    def seconds_per_unit(self) -> float | None:
        """The measured pace (None before a first answer)."""
        with self._ready:
            return self._busy_s / self._done if self._done > 0 else None

    def estimate_s(self, units: int) -> float | None:
        """Seconds ``units`` of work take at the measured pace (None before a first answer)."""
        pace = self.seconds_per_unit()
        return None if pace is None else pace * units

    @contextmanager
    def admitted(self, units: int) -> Iterator[None]:
        """Hold the block until the request fits, then count it in flight. Leaving the block
        normally counts its work as done; by an exception, as failed.

        Raises:
            QueuedBehindFailureError: a request sent before it failed for good while it waited.
        """
        with self._ready:
            failures = self._failures
            while True:
                if self._failures != failures:
                    raise QueuedBehindFailureError()
                if self._fits(units):
                    break
                self._ready.wait()
            self._tick()
            self._units += units
            self._count += 1
        ok = False
        try:
            yield
            ok = True
        finally:
            with self._ready:
                self._tick()
                self._units -= units
                self._count -= 1
                if ok:
                    self._busy_s *= DECAY
                    self._done = self._done * DECAY + units
                self._ready.notify_all()

    def failed_for_good(self) -> None:
        """A request failed after every retry: the requests queued now are not sent."""
        with self._ready:
            self._failures += 1
            self._ready.notify_all()

    def _fits(self, units: int) -> bool:
        if self._count == 0:
            return True  # alone, a request is sent whatever its size
        if self._done <= 0:
            return False  # no pace measured yet: one at a time
        pace = self._busy_s / self._done
        return (self._units + units) * pace <= SHARE * self.bound_s

    def _tick(self) -> None:
        """Add the time since the last event to the busy time when a request was in flight."""
        now = time.monotonic()
        if self._count > 0:
            self._busy_s += now - self._since
        self._since = now
