"""Shadow decisions: the decision made off the answer path, in a bounded background queue.

In shadow mode a wrapped chain answers with one side at the plain chain's latency and hands a
job to a :class:`Shadow` (run the other side, score both, decide under the shadow policy,
emit the framework's event, append to a :class:`ShadowLog`). The user's call never waits for
or fails because of the job: the queue is bounded (``max_pending``; overflow is dropped and
counted), one worker runs jobs, errors are logged; :meth:`Shadow.flush` waits for the queue.
The log is ``trustmargin check``'s input shape once a gold ``answer`` is added to each line.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trustmargin_integrations.errors import InvalidInputError
from trustmargin_integrations.files import check_destination, open_append
from trustmargin_integrations.rule import Policy
from trustmargin_integrations.schema import Decision, Passage
from trustmargin_integrations.vocabulary import Side

__all__ = ["SHADOW_QUEUE_SIZE", "Shadow", "ShadowLog", "ShadowStats", "shadow_record"]

logger = logging.getLogger(__name__)

SHADOW_QUEUE_SIZE = 64
"""Jobs a :class:`Shadow` holds waiting at most (besides the one running) before it drops
new ones."""


def shadow_record(decision: Decision, question: str, passages: Sequence[Passage],
                  direct_answer: str, rag_answer: str, served: Side) -> dict[str, Any]:
    """One log line: what ``trustmargin check`` reads (``question``, ``passages``, the chain's
    ``direct_answer`` / ``rag_answer``; ``answer`` is the label the user adds) and the
    shadow decision beside it."""
    return {"id": decision.id or uuid.uuid4().hex, "question": question,
            "passages": [{"title": p.title, "text": p.text} for p in passages],
            "direct_answer": direct_answer, "rag_answer": rag_answer, "served": served,
            "decision": decision.model_dump(mode="json")}


class ShadowLog:
    """An append-only JSONL file of shadow decisions (one :func:`shadow_record` per line).

    Each record is one ``write`` on an ``O_APPEND`` descriptor (``files.open_append``), so
    lines never interleave, and an existing file is only ever appended to.

    Raises:
        InvalidInputError: ``shadow_log`` is a link, a directory or another special file, or
            its folder does not exist (checked when the log is made, not at the first write).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise InvalidInputError("shadow_log", f"is in {self.path.parent}, which is not a "
                                    "folder", "create the folder, or give another path")
        check_destination(self.path)

    def append(self, record: dict[str, Any]) -> None:
        """Append one record as one line."""
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        fd = open_append(self.path)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@dataclass
class ShadowStats:
    """What a :class:`Shadow` did: jobs queued, run, failed (logged) and dropped (full)."""

    queued: int = 0
    done: int = 0
    failed: int = 0
    dropped: int = 0


class Shadow:
    """Shadow mode's settings and its background queue (one worker thread).

    Args:
        log: the JSONL file to append decisions to (None: events only).
        policy: who decides in the shadow (default: the paper's rule).
        max_pending: jobs held at most before new ones are dropped.

    Why a hand-written queue: ``concurrent.futures`` executors queue without bound (a slow
    scorer under load would grow memory until the process dies) and cannot drop; the
    standard library's bounded ``queue.Queue`` with ``put_nowait`` gives drop-when-full, and
    one daemon thread keeps the scorer's work in order and off the caller's threads.
    """

    def __init__(self, log: str | Path | ShadowLog | None = None, *,
                 policy: Policy | None = None, max_pending: int = SHADOW_QUEUE_SIZE) -> None:
        if policy is not None and not isinstance(policy, Policy):
            raise InvalidInputError("shadow.policy", f"a {type(policy).__name__} is not a "
                                    "policy", "pass a Policy (e.g. Policy.paper()) or None")
        if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
            raise InvalidInputError("shadow.max_pending", f"is {max_pending!r}",
                                    "pass a whole number of jobs, at least 1")
        self.log = log if isinstance(log, ShadowLog) or log is None else ShadowLog(log)
        self.policy = policy or Policy.paper()
        self.stats = ShadowStats()
        self._queue: queue.Queue[Callable[[], None]] = queue.Queue(maxsize=max_pending)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job`` without waiting; False (counted, warned) when the queue is full."""
        self._start()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            with self._lock:
                self.stats.dropped += 1
                dropped = self.stats.dropped
            logger.warning("TrustMargin shadow queue full (%d pending): a shadow decision was "
                           "dropped (%d so far); the answer was not affected. Raise "
                           "max_pending or use a faster scorer.", self._queue.maxsize, dropped)
            return False
        with self._lock:
            self.stats.queued += 1
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued job has run; False if ``timeout`` seconds pass first."""
        done = self._queue.all_tasks_done
        with done:
            return done.wait_for(lambda: self._queue.unfinished_tasks == 0, timeout)

    def _start(self) -> None:
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="trustmargin-shadow",
                                                daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                job()
            except Exception:  # the shadow never fails the user: logged and counted
                with self._lock:
                    self.stats.failed += 1
                logger.warning("TrustMargin shadow decision failed (the answer was not "
                               "affected)", exc_info=True)
            else:
                with self._lock:
                    self.stats.done += 1
            finally:
                self._queue.task_done()

    def record(self, record: dict[str, Any]) -> None:
        """Append ``record`` to the log, when there is one."""
        if self.log is not None:
            self.log.append(record)
